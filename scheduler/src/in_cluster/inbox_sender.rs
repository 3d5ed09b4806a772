//! The way into the scheduling loop's inbox. The channel is bounded: a flood of watch
//! events (a relist of a huge cluster, a storm of node heartbeats) pauses the watch tasks
//! until the loop catches up, instead of growing memory without limit. Results of work the
//! loop started (bindings, evictions, image lookups) are never dropped: they wait for room
//! in a task of their own, and there are no more of them than work in flight.

use tokio::sync::mpsc;

use super::inbox::LoopMessage;

/// Messages the inbox holds before senders wait.
pub const INBOX_CAPACITY: usize = 65_536;

/// The scheduling loop has stopped.
#[derive(Debug)]
pub struct LoopEnded;

#[derive(Clone)]
pub struct InboxSender(mpsc::Sender<LoopMessage>);

impl InboxSender {
    pub fn channel(capacity: usize) -> (InboxSender, mpsc::Receiver<LoopMessage>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (InboxSender(tx), rx)
    }

    /// From a task: waits while the inbox is full.
    pub async fn send(&self, message: LoopMessage) -> Result<(), LoopEnded> {
        self.0.send(message).await.map_err(|_| LoopEnded)
    }

    /// From synchronous code (completion guards): delivered now if there is room, else by
    /// a task that waits for it; dropped only once the loop has ended.
    pub fn deliver(&self, message: LoopMessage) {
        match self.0.try_send(message) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(message)) => {
                let sender = self.0.clone();
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move {
                        let _ = sender.send(message).await;
                    });
                } else {
                    tracing::error!(
                        "the scheduler inbox is full outside the runtime; a result is lost"
                    );
                }
            }
        }
    }

    /// Messages waiting in the inbox.
    pub fn depth(&self) -> usize {
        self.0.max_capacity() - self.0.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn results_wait_for_room_and_watches_are_paused() {
        let (inbox, mut rx) = InboxSender::channel(1);
        inbox
            .send(LoopMessage::NamespaceDelete("a".into()))
            .await
            .unwrap();
        assert_eq!(inbox.depth(), 1);
        // Full: a result is handed to a task, not dropped.
        inbox.deliver(LoopMessage::ImagesResolved(vec!["app:1".into()]));
        // A watch waits.
        let blocked = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            inbox.send(LoopMessage::NamespaceDelete("b".into())),
        )
        .await;
        assert!(blocked.is_err(), "a send into a full inbox must wait");
        assert!(matches!(rx.recv().await, Some(LoopMessage::NamespaceDelete(name)) if name == "a"));
        assert!(
            matches!(rx.recv().await, Some(LoopMessage::ImagesResolved(images)) if images == ["app:1"])
        );
        drop(rx);
        assert!(
            inbox
                .send(LoopMessage::NamespaceDelete("a".into()))
                .await
                .is_err()
        );
    }
}
