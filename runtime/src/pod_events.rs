//! Events on pods, as users read them in `kubectl describe pod`: events.k8s.io/v1 through
//! kube's Recorder (which folds repeats into a series), reported by one controller name
//! and this replica's identity.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes the events of one role.
#[derive(Clone)]
pub struct PodEvents {
    recorder: Recorder,
}

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

impl PodEvents {
    /// Events reported as `controller` (`reportingController`), from replica `instance`.
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        PodEvents {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: controller.into(),
                    instance: Some(instance.into()),
                },
            ),
        }
    }

    pub async fn publish(
        &self,
        pod: &ObjectReference,
        severity: Severity,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let event = Event {
            type_: match severity {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        self.recorder.publish(&event, pod).await
    }
}

/// The reference events use for a pod.
pub fn pod_reference(namespace: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        uid,
        ..ObjectReference::default()
    }
}
