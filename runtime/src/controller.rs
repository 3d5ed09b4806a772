//! The controller loop of multiarch's controllers: kube-runtime's `Controller` (a work
//! queue fed by watches: one reconcile per object at a time, bounded concurrency, relists
//! after dropped watches, graceful shutdown), with what every controller here needs
//! around it written once: an exponential backoff per object on errors (a success resets
//! it, and one failing object never slows the others), the error logged with the
//! object's name, and the loop stopped by the role's shutdown token.

use std::{
    collections::HashMap,
    fmt::Debug,
    future::Future,
    sync::{Arc, Mutex},
};

use futures_util::{FutureExt, StreamExt};
use kube::{
    Resource, ResourceExt,
    runtime::{
        Controller,
        controller::{self, Action},
    },
};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::backoff::Backoff;

#[derive(Clone, Copy, Debug)]
pub struct ControllerSettings {
    /// In logs.
    pub name: &'static str,
    /// Objects reconciled at once (never the same object twice at once).
    pub concurrency: u16,
    /// Wait before retrying an object whose reconcile failed, per consecutive failure.
    pub backoff: Backoff,
    /// How long a burst of changes to one object is waited out before it is reconciled
    /// once (kube-runtime's trailing-edge debounce); zero reconciles on every change.
    pub debounce: std::time::Duration,
}

struct Context<C> {
    inner: Arc<C>,
    settings: ControllerSettings,
    /// Consecutive failures per object.
    failures: Mutex<HashMap<String, u32>>,
}

impl<C> Context<C> {
    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn key<K: Resource>(object: &K) -> String {
    match object.namespace() {
        Some(ns) => format!("{ns}/{}", object.name_any()),
        None => object.name_any(),
    }
}

/// Runs `controller` with `reconcile` until `shutdown` is cancelled, then waits for the
/// reconciles in progress (none can be while the controller has not listed its objects
/// once: kube-runtime holds reconciles until then, and would hold the shutdown too).
pub async fn run<K, C, E, F, Fut>(
    controller: Controller<K>,
    settings: ControllerSettings,
    context: Arc<C>,
    reconcile: F,
    shutdown: CancellationToken,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    C: Send + Sync + 'static,
    E: std::error::Error + Send + Sync + 'static,
    F: Fn(Arc<K>, Arc<C>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action, E>> + Send + 'static,
{
    let context = Arc::new(Context {
        inner: context,
        settings,
        failures: Mutex::default(),
    });
    let listed = controller.store();
    let stopped = shutdown.clone();
    let running = controller
        .with_config(
            controller::Config::default()
                .concurrency(settings.concurrency)
                .debounce(settings.debounce),
        )
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(
            move |object: Arc<K>, context: Arc<Context<C>>| {
                let key = key(object.as_ref());
                let reconciled = reconcile(object, context.inner.clone());
                async move {
                    let result = reconciled.await;
                    if result.is_ok() {
                        context.failures().remove(&key);
                    }
                    result
                }
            },
            |object: Arc<K>, error: &E, context: Arc<Context<C>>| {
                let key = key(object.as_ref());
                let failures = {
                    let mut all = context.failures();
                    let count = all.entry(key.clone()).or_insert(0);
                    *count = count.saturating_add(1);
                    *count
                };
                let delay = context.settings.backoff.after(failures);
                warn!(controller = context.settings.name, object = %key, %error, failures, retry_in = ?delay, "reconcile failed");
                Action::requeue(delay)
            },
            context,
        )
        .for_each(|result| async move {
            match result {
                Ok(_) | Err(controller::Error::ReconcilerFailed(..)) => {}
                // The object went away between the trigger and the reconcile.
                Err(controller::Error::ObjectNotFound(object)) => {
                    debug!(%object, "gone before it was reconciled");
                }
                Err(e) => warn!(controller = settings.name, error = %e, "controller error"),
            }
        });
    tokio::pin!(running);
    tokio::select! {
        () = &mut running => return,
        () = stopped.cancelled() => {}
    }
    if listed.wait_until_ready().now_or_never().is_some() {
        running.await;
    } else {
        warn!(
            controller = settings.name,
            "stopped before its objects could be listed once; nothing was reconciled"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::{sync::atomic::AtomicU32, time::Duration};

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::{Api, runtime::watcher};
    use multiarch_fake_apiserver::FakeApiServer;
    use serde_json::json;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("injected failure")]
    struct Injected;

    #[derive(Default)]
    struct Seen {
        calls: Mutex<Vec<(String, tokio::time::Instant)>>,
        failures_left: AtomicU32,
    }

    async fn reconcile(object: Arc<ConfigMap>, seen: Arc<Seen>) -> Result<Action, Injected> {
        let name = object.name_any();
        seen.calls
            .lock()
            .unwrap()
            .push((name.clone(), tokio::time::Instant::now()));
        if name == "flaky" {
            let left = seen.failures_left.load(std::sync::atomic::Ordering::SeqCst);
            if left > 0 {
                seen.failures_left
                    .store(left - 1, std::sync::atomic::Ordering::SeqCst);
                return Err(Injected);
            }
        }
        Ok(Action::await_change())
    }

    fn calls(seen: &Seen, name: &str) -> Vec<tokio::time::Instant> {
        seen.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failures_back_off_per_object_and_shutdown_stops_the_loop() {
        let server = FakeApiServer::start().await;
        for name in ["flaky", "fine"] {
            server.apply(
                "configmaps",
                json!({"metadata": {"name": name, "namespace": "default"}}),
            );
        }
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let seen = Arc::new(Seen::default());
        seen.failures_left
            .store(3, std::sync::atomic::Ordering::SeqCst);
        let settings = ControllerSettings {
            name: "test",
            concurrency: 2,
            backoff: Backoff::new(Duration::from_millis(50), Duration::from_millis(400)),
            debounce: Duration::ZERO,
        };
        let shutdown = CancellationToken::new();
        let controller = Controller::new(
            Api::<ConfigMap>::namespaced(client, "default"),
            watcher::Config::default(),
        );
        let running = tokio::spawn(run(
            controller,
            settings,
            seen.clone(),
            reconcile,
            shutdown.clone(),
        ));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while calls(&seen, "flaky").len() < 4 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "never retried enough"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let flaky = calls(&seen, "flaky");
        // Three failures, then success: waits of 50, 100 and 200 ms between attempts.
        for (i, want) in [50u64, 100, 200].into_iter().enumerate() {
            let waited = flaky[i + 1] - flaky[i];
            assert!(
                waited >= Duration::from_millis(want),
                "attempt {} came after {waited:?}, before the {want} ms backoff",
                i + 2
            );
        }
        assert_eq!(
            calls(&seen, "fine").len(),
            1,
            "the healthy object is not retried"
        );
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("the loop stops on shutdown")
            .unwrap();
    }

    #[tokio::test]
    async fn it_stops_on_shutdown_when_its_objects_were_never_listed() {
        let server = FakeApiServer::start().await;
        let path = "/api/v1/namespaces/default/configmaps";
        server.inject(multiarch_fake_apiserver::Fault::new(
            Some(http::Method::GET),
            path,
            multiarch_fake_apiserver::Effect::Status(500),
        ));
        let client =
            kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        let settings = ControllerSettings {
            name: "test",
            concurrency: 1,
            backoff: Backoff::new(Duration::from_millis(50), Duration::from_millis(400)),
            debounce: Duration::ZERO,
        };
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(run(
            Controller::new(
                Api::<ConfigMap>::namespaced(client, "default"),
                watcher::Config::default(),
            ),
            settings,
            Arc::new(Seen::default()),
            reconcile,
            shutdown.clone(),
        ));
        while !server.requests().iter().any(|r| r.contains(path)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), running)
            .await
            .expect("the loop stops on shutdown though its list keeps failing")
            .unwrap();
    }
}
