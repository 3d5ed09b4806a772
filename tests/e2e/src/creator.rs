//! Pods created in the background at a steady pace while a case changes the cluster
//! under them (a mode switch, components restarting), as a workload would.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::{kubectl::Kubectl, pods};

pub struct Creator {
    stop: Arc<AtomicBool>,
    created: Arc<AtomicUsize>,
    thread: JoinHandle<Created>,
}

/// What the creator did: pods it created, and creations the API server refused (with
/// why): a refusal is a finding, not something to retry past.
#[derive(Debug, Default)]
pub struct Created {
    pub names: Vec<String>,
    pub refused: Vec<String>,
}

impl Creator {
    /// Creates `PREFIX-N` sleepers of `image` in `namespace`, one per `every`.
    pub fn start(
        kubectl: Kubectl,
        namespace: &str,
        prefix: &str,
        image: &str,
        every: Duration,
    ) -> Creator {
        Creator::start_at_most(kubectl, namespace, prefix, image, every, usize::MAX)
    }

    /// [`Creator::start`], stopping on its own after `at_most` attempts.
    pub fn start_at_most(
        kubectl: Kubectl,
        namespace: &str,
        prefix: &str,
        image: &str,
        every: Duration,
        at_most: usize,
    ) -> Creator {
        let stop = Arc::new(AtomicBool::new(false));
        let (namespace, prefix, image) =
            (namespace.to_owned(), prefix.to_owned(), image.to_owned());
        let stopping = stop.clone();
        let count = Arc::new(AtomicUsize::new(0));
        let counting = count.clone();
        let thread = std::thread::spawn(move || {
            let mut created = Created::default();
            let mut n = 0;
            while !stopping.load(Ordering::SeqCst) && n < at_most {
                let name = format!("{prefix}-{n}");
                n += 1;
                let pod = pods::sleeper(&namespace, &name, &image);
                match kubectl.run_with(
                    &["create", "-f", "-"],
                    &pod.to_string(),
                    crate::kubectl::CALL_DEADLINE,
                ) {
                    Ok(_) => {
                        created.names.push(name);
                        counting.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => created.refused.push(format!("{name}: {e:#}")),
                }
                std::thread::sleep(every);
            }
            created
        });
        Creator {
            stop,
            created: count,
            thread,
        }
    }

    /// Pods created so far (the next one may be on its way).
    pub fn created_so_far(&self) -> usize {
        self.created.load(Ordering::SeqCst)
    }

    /// Waits until `count` pods in all have been created.
    pub fn wait_for(&self, count: usize, deadline: Duration) -> anyhow::Result<()> {
        crate::wait::until_true(&format!("{count} pods created"), deadline, || {
            let so_far = self.created_so_far();
            Ok((so_far >= count, format!("{so_far} so far")))
        })
    }

    /// Stops creating; what was created.
    pub fn stop(self) -> Created {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}
