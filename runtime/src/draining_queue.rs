//! A writer's queue that outlives SIGTERM: read until the role shuts down, then closed
//! (no sender can add to it) and drained, so that what was accepted is still written.

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub struct DrainingQueue<T> {
    rx: mpsc::Receiver<T>,
    shutdown: CancellationToken,
    closing: bool,
}

impl<T> DrainingQueue<T> {
    pub fn new(rx: mpsc::Receiver<T>, shutdown: CancellationToken) -> Self {
        DrainingQueue {
            rx,
            shutdown,
            closing: false,
        }
    }

    /// The next item; `None` once the queue is closed and empty: after shutdown, or
    /// when every sender is gone.
    pub async fn next(&mut self) -> Option<T> {
        loop {
            if self.closing {
                return self.rx.recv().await;
            }
            // Shutdown first: from then on nothing new is accepted.
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => {
                    self.rx.close();
                    self.closing = true;
                }
                item = self.rx.recv() => return item,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn what_was_queued_before_shutdown_is_still_handed_out() {
        let (tx, rx) = mpsc::channel(4);
        let shutdown = CancellationToken::new();
        let mut queue = DrainingQueue::new(rx, shutdown.clone());
        tx.send(1).await.unwrap();
        assert_eq!(queue.next().await, Some(1));
        tx.send(2).await.unwrap();
        tx.send(3).await.unwrap();
        shutdown.cancel();
        assert_eq!(queue.next().await, Some(2));
        assert!(tx.send(4).await.is_err(), "closed to new items");
        assert_eq!(queue.next().await, Some(3));
        assert_eq!(queue.next().await, None);
    }

    #[tokio::test]
    async fn it_ends_when_every_sender_is_gone() {
        let (tx, rx) = mpsc::channel::<u8>(1);
        let mut queue = DrainingQueue::new(rx, CancellationToken::new());
        drop(tx);
        assert_eq!(queue.next().await, None);
    }
}
