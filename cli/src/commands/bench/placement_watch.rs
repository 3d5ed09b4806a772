//! Watches the run's pods and records when each is first seen bound, until all are or
//! the deadline passes.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Instant,
};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    runtime::{WatchStreamExt, watcher},
};
use tokio::sync::watch;

/// Pod name → (bound at, node).
pub type Bindings = HashMap<String, (Instant, String)>;

/// A running watch: the bindings seen so far, and how many.
pub struct PlacementWatch {
    bindings: Arc<Mutex<Bindings>>,
    count: watch::Receiver<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl PlacementWatch {
    /// Starts watching the pods labelled `selector` in `namespace`; returns once the
    /// watch has listed (so nothing bound after this call is missed).
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        selector: &str,
    ) -> anyhow::Result<Self> {
        let api: Api<Pod> = Api::namespaced(client, namespace);
        let bindings = Arc::new(Mutex::new(Bindings::new()));
        let (count_tx, count) = watch::channel(0);
        let (ready_tx, ready) = tokio::sync::oneshot::channel::<Result<(), String>>();
        let seen = bindings.clone();
        let config = watcher::Config::default().labels(selector);
        let task = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let pod = match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(Ok(()));
                        }
                        continue;
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "the benchmark's pod watch failed; retrying");
                        continue;
                    }
                };
                let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                let (Some(name), Some(node)) = (pod.metadata.name, node.filter(|n| !n.is_empty()))
                else {
                    continue;
                };
                let mut bindings = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                bindings.entry(name).or_insert((Instant::now(), node));
                let _ = count_tx.send(bindings.len());
            }
        });
        match tokio::time::timeout(std::time::Duration::from_secs(60), ready).await {
            Ok(Ok(Ok(()))) => {}
            _ => {
                task.abort();
                anyhow::bail!("the pod watch did not start within 60 s");
            }
        }
        Ok(PlacementWatch {
            bindings,
            count,
            task,
        })
    }

    /// Waits until `pods` are bound or `deadline`; the bindings seen either way (the
    /// watch ends when this returns).
    pub async fn wait(mut self, pods: usize, deadline: Instant) -> Bindings {
        let _ = tokio::time::timeout_at(deadline.into(), self.count.wait_for(|n| *n >= pods)).await;
        self.task.abort();
        std::mem::take(
            &mut *self
                .bindings
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl Drop for PlacementWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}
