//! Following a value that changes (a `watch` channel: the role's readiness, the
//! ClusterPodPlacementConfig, its log verbosity) with a supervised task: every role hands
//! each new value on the same way, and ends the same way when the value's source is gone.

use std::future::Future;

use tokio::sync::watch;

use crate::supervisor::Tasks;

/// What the follower does when the value's sender is dropped before shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderGone {
    /// The last value stands: the follower waits for shutdown (a role's readiness whose
    /// producer ended is reported by that producer's own task).
    KeepLast,
    /// The role cannot go on without new values: the follower fails with this reason, and
    /// the supervisor ends the role.
    Fail(&'static str),
}

impl Tasks {
    /// Runs `apply` with each new value of `values` (not the one already there when it
    /// starts) until shutdown, as the supervised task `name`.
    pub fn follow<T: Clone + Send + Sync + 'static>(
        &self,
        name: &'static str,
        values: watch::Receiver<T>,
        sender_gone: SenderGone,
        mut apply: impl FnMut(T) + Send + 'static,
    ) {
        self.follow_async(name, values, sender_gone, move |value| {
            apply(value);
            std::future::ready(())
        });
    }

    /// [`follow`](Self::follow) with an `apply` that may wait (to hand the value to a
    /// bounded queue); changes made meanwhile reach it as the latest value.
    pub fn follow_async<T, F, Fut>(
        &self,
        name: &'static str,
        mut values: watch::Receiver<T>,
        sender_gone: SenderGone,
        mut apply: F,
    ) where
        T: Clone + Send + Sync + 'static,
        F: FnMut(T) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let shutdown = self.shutdown().clone();
        self.spawn(name, async move {
            loop {
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => return Ok(()),
                    changed = values.changed() => if changed.is_err() {
                        // At shutdown the sender may go before this task sees the token.
                        return match sender_gone {
                            _ if shutdown.is_cancelled() => Ok(()),
                            SenderGone::KeepLast => {
                                shutdown.cancelled().await;
                                Ok(())
                            }
                            SenderGone::Fail(reason) => Err(reason),
                        };
                    },
                }
                let value = values.borrow_and_update().clone();
                // A wait in `apply` (a full queue whose reader stopped) must not hold up
                // the drain.
                tokio::select! {
                    biased;
                    () = shutdown.cancelled() => return Ok(()),
                    () = apply(value) => {}
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::mpsc;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::supervisor::{Supervisor, SupervisorError};

    const GRACE: Duration = Duration::from_secs(1);

    /// A supervisor whose follower forwards every value it is handed to the returned queue.
    fn following(
        values: watch::Receiver<u32>,
        sender_gone: SenderGone,
    ) -> (Supervisor, CancellationToken, mpsc::UnboundedReceiver<u32>) {
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(shutdown.clone());
        let (seen_tx, seen) = mpsc::unbounded_channel();
        supervisor
            .tasks()
            .follow("follower", values, sender_gone, move |value| {
                let _ = seen_tx.send(value);
            });
        (supervisor, shutdown, seen)
    }

    #[tokio::test]
    async fn every_new_value_is_applied_and_the_first_is_not() {
        let (sender, values) = watch::channel(1);
        let (supervisor, shutdown, mut seen) = following(values, SenderGone::KeepLast);
        sender.send_replace(2);
        assert_eq!(seen.recv().await, Some(2));
        sender.send_replace(3);
        assert_eq!(seen.recv().await, Some(3));
        shutdown.cancel();
        supervisor.wait(GRACE).await.expect("a clean shutdown");
        assert_eq!(seen.try_recv().ok(), None, "1 was there before it started");
    }

    #[tokio::test(start_paused = true)]
    async fn an_apply_that_waits_gets_the_latest_value_after_it() {
        let (sender, values) = watch::channel(1);
        let shutdown = CancellationToken::new();
        let supervisor = Supervisor::new(shutdown.clone());
        // A queue of one, which the test reads only later: the follower waits in `apply`.
        let (queue_tx, mut queue) = mpsc::channel(1);
        let needed = SenderGone::Fail("gone");
        supervisor
            .tasks()
            .follow_async("forwarder", values, needed, move |value| {
                let queue_tx = queue_tx.clone();
                async move {
                    let _ = queue_tx.send(value).await;
                }
            });
        // The paused clock runs ahead only once every task is idle: each sleep lets the
        // follower go as far as it can.
        let settle = || tokio::time::sleep(Duration::from_secs(1));
        sender.send_replace(2);
        settle().await; // 2 queued
        sender.send_replace(3);
        settle().await; // waiting to queue 3
        sender.send_replace(4);
        sender.send_replace(5);
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.extend(queue.recv().await);
        }
        assert_eq!(seen, [2, 3, 5], "4 was replaced while the follower waited");
        // Waiting again (6 queued, 7 waits), it still stops at shutdown.
        sender.send_replace(6);
        settle().await;
        sender.send_replace(7);
        settle().await;
        shutdown.cancel();
        supervisor.wait(GRACE).await.expect("a clean shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_sender_leaves_the_last_value_standing_until_shutdown() {
        let (sender, values) = watch::channel(1);
        let (supervisor, shutdown, _seen) = following(values, SenderGone::KeepLast);
        drop(sender);
        let waiting = tokio::spawn(supervisor.wait(GRACE));
        // The paused clock runs ahead only while every task is idle: an hour passes with
        // the follower still running.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(
            !waiting.is_finished(),
            "the follower ended without a shutdown"
        );
        shutdown.cancel();
        waiting
            .await
            .expect("the supervisor's wait")
            .expect("a clean shutdown");
    }

    #[tokio::test(start_paused = true)]
    async fn a_gone_sender_ends_the_role_when_the_values_are_needed() {
        let (sender, values) = watch::channel(1);
        let (supervisor, _shutdown, _seen) =
            following(values, SenderGone::Fail("the configuration watch ended"));
        drop(sender);
        match supervisor.wait(GRACE).await {
            Err(SupervisorError::Failed { name, error }) => {
                assert_eq!(name, "follower");
                assert_eq!(error, "the configuration watch ended");
            }
            other => panic!("expected the follower's failure, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_sender_gone_at_shutdown_is_not_a_failure() {
        let (sender, values) = watch::channel(1);
        let (supervisor, shutdown, _seen) = following(values, SenderGone::Fail("gone"));
        shutdown.cancel();
        drop(sender);
        supervisor.wait(GRACE).await.expect("a clean shutdown");
    }
}
