//! Handing a placement to whoever writes it: the Kubernetes binder (pods/binding) in a
//! cluster, or the in-memory binder of `simulate` and tests.

use multiarch_plugins::model::{pod::PodInfo, storage::VolumeBindingPlan};

/// A decided placement. `uid` is the precondition: a recreated pod with the same name is
/// never bound by mistake. `volumes` are written (and waited for) first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub volumes: VolumeBindingPlan,
    /// The pod's `status.nominatedNodeName` when it was decided about.
    pub nominated: Option<String>,
}

impl Binding {
    pub fn of(pod: &PodInfo, node: &str, volumes: VolumeBindingPlan) -> Self {
        Binding {
            namespace: pod.namespace.to_string(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            node: node.to_owned(),
            volumes,
            nominated: pod.extras().nominated_node.clone(),
        }
    }
}

pub trait Binder {
    /// Starts binding; must not block the scheduling loop. The outcome comes back as a
    /// pod update (bound) or through `SchedulerCore::binding_failed`.
    fn bind(&mut self, binding: Binding);
}

/// Counts bindings and lets them go; the caller confirms them (as a watch would). The
/// bindings themselves are not kept: nothing reads them, and at 260,000 pods they were
/// `simulate`'s largest record.
#[derive(Debug, Default)]
pub struct InMemoryBinder {
    pub bound: u64,
}

impl Binder for InMemoryBinder {
    fn bind(&mut self, binding: Binding) {
        drop(binding);
        self.bound += 1;
    }
}
