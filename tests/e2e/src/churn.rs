//! Pods created at a steady rate in batches (one `kubectl create` of a List each second)
//! while a case removes or switches multiarch's route (a `pod_watch` records the pods the
//! API server deletes meanwhile: what proves that no pod bound to a node was deleted,
//! force-killed, by a release).

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{creator::Created, kubectl::Kubectl};

/// A pod bound to `node` (a Node object without a kubelet, tainted so nothing else lands
/// there): placed, never run, so a thousand of them cost the cluster nothing.
pub fn pinned_pod(namespace: &str, name: &str, image: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"e2e": "churn"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "app", "image": image, "command": ["sleep", "3600"],
                            "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}],
        },
    })
}

pub struct Churn {
    stop: Arc<AtomicBool>,
    created: Arc<AtomicUsize>,
    thread: JoinHandle<Created>,
}

impl Churn {
    /// `per_second` pods a second, named `PREFIX-N`, pinned to `node`.
    pub fn start(
        kubectl: Kubectl,
        namespace: &str,
        prefix: &str,
        image: &str,
        node: &str,
        per_second: usize,
    ) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let created = Arc::new(AtomicUsize::new(0));
        let (stopping, counting) = (stop.clone(), created.clone());
        let (namespace, prefix, image, node) = (
            namespace.to_owned(),
            prefix.to_owned(),
            image.to_owned(),
            node.to_owned(),
        );
        let thread = std::thread::spawn(move || {
            let mut out = Created::default();
            let mut n = 0;
            while !stopping.load(Ordering::SeqCst) {
                let started = Instant::now();
                let names: Vec<String> = (0..per_second)
                    .map(|i| format!("{prefix}-{}", n + i))
                    .collect();
                n += per_second;
                let items: Vec<Value> = names
                    .iter()
                    .map(|name| pinned_pod(&namespace, name, &image, &node))
                    .collect();
                let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
                match kubectl.output(
                    &["create", "-f", "-", "-o", "name"],
                    &list.to_string(),
                    crate::kubectl::CALL_DEADLINE,
                ) {
                    Ok(output) => {
                        for name in &names {
                            if output.stdout.lines().any(|l| l == format!("pod/{name}")) {
                                out.names.push(name.clone());
                                counting.fetch_add(1, Ordering::SeqCst);
                            } else {
                                out.refused
                                    .push(format!("{name}: {}", output.stderr.trim()));
                            }
                        }
                    }
                    Err(e) => out.refused.push(format!("{names:?}: {e:#}")),
                }
                std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
            }
            out
        });
        Churn {
            stop,
            created,
            thread,
        }
    }

    pub fn created_so_far(&self) -> usize {
        self.created.load(Ordering::SeqCst)
    }

    /// Waits until `count` pods in all have been created.
    pub fn wait_for(&self, count: usize, deadline: Duration) -> anyhow::Result<()> {
        crate::wait::until_true(&format!("{count} pods created"), deadline, || {
            let so_far = self.created_so_far();
            Ok((so_far >= count, format!("{so_far} created")))
        })
    }

    pub fn stop(self) -> Created {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}
