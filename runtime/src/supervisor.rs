//! Task supervision. Every long-running task of a role is spawned through [`Tasks`]: when
//! one ends before shutdown (returns, fails or panics), the role ends with an error that
//! names it, so Kubernetes restarts the pod rather than leaving it running half-dead. On
//! shutdown every task sees the token cancelled, and the role waits up to a grace period
//! for them to drain.

use std::{
    fmt::Display,
    future::Future,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::leader_metric::LeaderGauge;

#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("{name} failed: {error}")]
    Failed { name: &'static str, error: String },
    #[error("{name} panicked: {message}")]
    Panicked { name: &'static str, message: String },
    #[error("{name} stopped on its own")]
    Stopped { name: &'static str },
    #[error("{pending} task(s) still running {grace:?} after the shutdown began")]
    DrainTimeout { pending: usize, grace: Duration },
}

enum Outcome {
    Finished,
    Failed(String),
    Panicked(String),
}

struct Exit {
    name: &'static str,
    outcome: Outcome,
}

impl Exit {
    fn error(self) -> SupervisorError {
        match self.outcome {
            Outcome::Finished => SupervisorError::Stopped { name: self.name },
            Outcome::Failed(error) => SupervisorError::Failed {
                name: self.name,
                error,
            },
            Outcome::Panicked(message) => SupervisorError::Panicked {
                name: self.name,
                message,
            },
        }
    }
}

/// The handle roles spawn their long-running tasks with.
#[derive(Clone)]
pub struct Tasks {
    shutdown: CancellationToken,
    exits: mpsc::UnboundedSender<Exit>,
    running: Arc<AtomicUsize>,
    /// Whether this process leads each Lease it competes for: set by the electors its
    /// tasks start, registered by the role.
    leaders: LeaderGauge,
}

impl Tasks {
    /// `multiarch_leader{lease}` for every Lease this process's roles compete for.
    pub fn leaders(&self) -> &LeaderGauge {
        &self.leaders
    }

    /// The token every task must watch: cancelled when the role shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// Runs `task` under supervision. It is expected to run until the shutdown token is
    /// cancelled; ending earlier, in any way, ends the role.
    pub fn spawn<F, E>(&self, name: &'static str, task: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.running.fetch_add(1, Ordering::SeqCst);
        let exits = self.exits.clone();
        let running = self.running.clone();
        let handle = if injected_panic(name) {
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                panic!("injected by {INJECT_PANIC}");
            })
        } else {
            tokio::spawn(task)
        };
        tokio::spawn(async move {
            let outcome = match handle.await {
                Ok(Ok(())) => Outcome::Finished,
                Ok(Err(e)) => Outcome::Failed(e.to_string()),
                Err(join) => Outcome::Panicked(panic_message(join)),
            };
            running.fetch_sub(1, Ordering::SeqCst);
            let _ = exits.send(Exit { name, outcome });
        });
    }

    /// [`spawn`](Self::spawn) for a task that cannot fail: a server or a follower that
    /// ends only at shutdown (ending before it still ends the role).
    pub fn spawn_infallible(
        &self,
        name: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        self.spawn(name, async move {
            task.await;
            Ok::<(), std::convert::Infallible>(())
        });
    }
}

/// Debug builds only: the task of this name panics shortly after it starts, so that a
/// test can watch the whole process handle a panicking task. Release builds ignore it.
const INJECT_PANIC: &str = "MULTIARCH_DEBUG_PANIC_IN_TASK";

fn injected_panic(name: &str) -> bool {
    cfg!(debug_assertions) && std::env::var(INJECT_PANIC).is_ok_and(|task| task == name)
}

fn panic_message(join: tokio::task::JoinError) -> String {
    if !join.is_panic() {
        return "cancelled".into();
    }
    let payload = join.into_panic();
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Owns the tasks of a role and decides when the role ends.
pub struct Supervisor {
    tasks: Tasks,
    exits: mpsc::UnboundedReceiver<Exit>,
}

impl Supervisor {
    /// A supervisor whose role shuts down when `shutdown` is cancelled (see
    /// [`crate::shutdown::on_signal`]).
    pub fn new(shutdown: CancellationToken) -> Self {
        let (exits, rx) = mpsc::unbounded_channel();
        Supervisor {
            tasks: Tasks {
                shutdown,
                exits,
                running: Arc::new(AtomicUsize::new(0)),
                leaders: LeaderGauge::default(),
            },
            exits: rx,
        }
    }

    pub fn tasks(&self) -> Tasks {
        self.tasks.clone()
    }

    /// Waits until the shutdown or the first task that ends on its own. Either way the
    /// other tasks are cancelled and get `grace` to drain. `Ok` only for a clean shutdown.
    pub async fn wait(mut self, grace: Duration) -> Result<(), SupervisorError> {
        let shutdown = self.tasks.shutdown.clone();
        // A task that ends because the shutdown began is not a failure: the shutdown is
        // checked first, and again for a task that simply finished.
        let failure = tokio::select! {
            biased;
            () = shutdown.cancelled() => None,
            exit = self.exits.recv() => exit.filter(|exit| {
                !(matches!(exit.outcome, Outcome::Finished) && shutdown.is_cancelled())
            }),
        };
        let failure = failure.map(|exit| {
            let error = exit.error();
            error!(%error, "a task of this role ended; shutting the role down");
            error
        });
        shutdown.cancel();
        let drained = self.drain(grace).await;
        match (failure, drained) {
            (Some(error), _) | (None, Err(error)) => Err(error),
            (None, Ok(())) => {
                info!("stopped");
                Ok(())
            }
        }
    }

    async fn drain(&mut self, grace: Duration) -> Result<(), SupervisorError> {
        let deadline = tokio::time::Instant::now() + grace;
        while self.tasks.running.load(Ordering::SeqCst) > 0 {
            tokio::select! {
                exit = self.exits.recv() => match exit {
                    Some(Exit { outcome: Outcome::Finished, .. }) => {}
                    Some(exit) => warn!(error = %exit.error(), "a task failed while draining"),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => {
                    return Err(SupervisorError::DrainTimeout {
                        pending: self.tasks.running.load(Ordering::SeqCst),
                        grace,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn until_cancelled(token: CancellationToken) -> Result<(), String> {
        token.cancelled().await;
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_shutdown_drains_every_task() {
        let token = CancellationToken::new();
        let supervisor = Supervisor::new(token.clone());
        let tasks = supervisor.tasks();
        tasks.spawn("a", until_cancelled(token.clone()));
        tasks.spawn("b", until_cancelled(token.clone()));
        token.cancel();
        supervisor.wait(Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn tasks_that_ended_because_of_the_shutdown_are_not_failures() {
        // The SIGTERM race: the tasks have already reported their end when the
        // supervisor looks, and the shutdown is cancelled too.
        for _ in 0..20 {
            let token = CancellationToken::new();
            let supervisor = Supervisor::new(token.clone());
            let tasks = supervisor.tasks();
            tasks.spawn("readiness", until_cancelled(token.clone()));
            token.cancel();
            while tasks.running.load(Ordering::SeqCst) > 0 {
                tokio::task::yield_now().await;
            }
            supervisor.wait(Duration::from_secs(5)).await.unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_task_ends_the_role_with_its_name() {
        let token = CancellationToken::new();
        let supervisor = Supervisor::new(token.clone());
        let tasks = supervisor.tasks();
        tasks.spawn("watch", until_cancelled(token.clone()));
        tasks.spawn("writer", async { Err::<(), _>("connection refused") });
        let error = supervisor.wait(Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(error.to_string(), "writer failed: connection refused");
        assert!(token.is_cancelled(), "the other tasks are told to stop");
    }

    #[tokio::test(start_paused = true)]
    async fn panics_and_silent_exits_end_the_role_too() {
        let token = CancellationToken::new();
        let supervisor = Supervisor::new(token.clone());
        supervisor
            .tasks()
            .spawn("loop", async { Ok::<(), String>(()) });
        let error = supervisor.wait(Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(error.to_string(), "loop stopped on its own");

        // A task that cannot fail (a server) still may not end before the shutdown.
        let supervisor = Supervisor::new(CancellationToken::new());
        supervisor.tasks().spawn_infallible("server", async {});
        let error = supervisor.wait(Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(error.to_string(), "server stopped on its own");

        let supervisor = Supervisor::new(CancellationToken::new());
        #[allow(clippy::unreachable)]
        supervisor.tasks().spawn("cache", async {
            if true {
                panic!("index out of bounds");
            }
            Ok::<(), String>(())
        });
        let error = supervisor.wait(Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(error.to_string(), "cache panicked: index out of bounds");
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ignores_the_shutdown_is_reported() {
        let token = CancellationToken::new();
        let supervisor = Supervisor::new(token.clone());
        supervisor
            .tasks()
            .spawn("stuck", std::future::pending::<Result<(), String>>());
        token.cancel();
        let error = supervisor.wait(Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(
            error,
            SupervisorError::DrainTimeout { pending: 1, .. }
        ));
    }
}
