//! A watch of pods (`kubectl get pods --watch-only`) that records every pod of one kind of
//! event while it runs, as the event carried it: the churn cases record the pods the API
//! server deletes (what proves no bound pod was force-deleted by a release), the
//! sig-scheduling pass the pods created (what proves each was routed to multiarch).

use std::{
    io::BufReader,
    process::Child,
    sync::{Arc, Mutex},
    thread::JoinHandle,
};

use anyhow::Context;
use serde_json::Value;

use crate::kubectl::Kubectl;

/// Which pods a watch covers.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    Namespace(&'a str),
    AllNamespaces,
}

pub struct PodWatch {
    child: Child,
    seen: Arc<Mutex<Vec<Value>>>,
    reader: JoinHandle<()>,
}

impl PodWatch {
    /// Records the pods of every event of type `kind` (`ADDED`, `MODIFIED`, `DELETED`) in
    /// `scope`.
    pub fn start(kubectl: &Kubectl, scope: Scope, kind: &'static str) -> anyhow::Result<Self> {
        let mut args = vec!["get", "pods"];
        match scope {
            Scope::Namespace(namespace) => args.extend(["-n", namespace]),
            Scope::AllNamespaces => args.push("--all-namespaces"),
        }
        args.extend(["--watch-only", "--output-watch-events", "-o", "json"]);
        let mut child = kubectl.spawn(&args)?;
        let stdout = child.stdout.take().context("the watch has no stdout")?;
        let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
        let recording = seen.clone();
        let reader = std::thread::spawn(move || {
            let events =
                serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>();
            for mut event in events.map_while(Result::ok) {
                if event["type"] == kind
                    && let Ok(mut seen) = recording.lock()
                {
                    seen.push(event["object"].take());
                }
            }
        });
        Ok(PodWatch {
            child,
            seen,
            reader,
        })
    }

    /// Stops the watch (by its pid): the pods recorded while it ran.
    pub fn stop(mut self) -> Vec<Value> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.reader.join();
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}
