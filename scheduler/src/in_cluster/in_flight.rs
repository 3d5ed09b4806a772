//! The bindings the loop has handed to the binder and not yet heard back about. A pod
//! deleted meanwhile stays counted (its binding task may still be writing, and shutdown
//! waits for every task) but is marked: whatever its binding's result, it is never
//! requeued, reported or bound again. Deletes are final.

use std::{collections::HashMap, sync::Arc};

use multiarch_plugins::model::pod::PodInfo;

/// A binding under way.
pub(super) struct InFlight {
    pub pod: Arc<PodInfo>,
    /// Scheduling attempts so far (the error backoff after a failed binding counts them).
    pub attempts: u32,
    /// The `Scheduled` event's note once bound.
    pub message: String,
}

struct Entry {
    flight: InFlight,
    deleted: bool,
}

#[derive(Default)]
pub(super) struct InFlightBindings {
    by_uid: HashMap<String, Entry>,
}

impl InFlightBindings {
    pub fn start(&mut self, flight: InFlight) {
        self.by_uid.insert(
            flight.pod.uid.clone(),
            Entry {
                flight,
                deleted: false,
            },
        );
    }

    /// The pod was deleted: its binding's result, whenever it comes, is only accounted.
    pub fn pod_deleted(&mut self, uid: &str) {
        if let Some(entry) = self.by_uid.get_mut(uid) {
            entry.deleted = true;
        }
    }

    /// The binding's result came back: the binding, unless its pod was deleted meanwhile
    /// (or it is not one of ours), when there is nothing left to act on.
    pub fn finish(&mut self, uid: &str) -> Option<InFlight> {
        let entry = self.by_uid.remove(uid)?;
        (!entry.deleted).then_some(entry.flight)
    }

    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use multiarch_plugins::model::pod::PodBuilder;

    fn flight(name: &str) -> InFlight {
        InFlight {
            pod: Arc::new(PodBuilder::new("shop", name).info()),
            attempts: 1,
            message: String::new(),
        }
    }

    #[test]
    fn a_result_is_acted_on_once() {
        let mut bindings = InFlightBindings::default();
        let web = flight("web");
        let uid = web.pod.uid.clone();
        bindings.start(web);
        assert_eq!(bindings.len(), 1);
        assert_eq!(
            bindings.finish(&uid).map(|f| f.pod.uid.clone()),
            Some(uid.clone())
        );
        assert!(bindings.is_empty());
        assert!(
            bindings.finish(&uid).is_none(),
            "a second result is not ours"
        );
    }

    #[test]
    fn a_pod_deleted_while_its_binding_runs_is_counted_until_its_result_then_dropped() {
        let mut bindings = InFlightBindings::default();
        let web = flight("web");
        let uid = web.pod.uid.clone();
        bindings.start(web);
        bindings.start(flight("other"));
        bindings.pod_deleted(&uid);
        // Still under way: shutdown waits for its task.
        assert_eq!(bindings.len(), 2);
        // A failed (or any) result of the deleted pod's binding is nothing to act on.
        assert!(bindings.finish(&uid).is_none());
        assert_eq!(bindings.len(), 1);
        // Deleting a pod with no binding under way changes nothing.
        bindings.pod_deleted("no-such-uid");
        assert_eq!(bindings.len(), 1);
    }
}
