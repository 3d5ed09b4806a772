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
            note: Some(truncate_note(note)),
            action: action.into(),
            secondary: None,
        };
        self.recorder.publish(&event, pod).await
    }
}

/// The longest note events.k8s.io accepts (`NoteLengthLimit`, bytes): a longer one is
/// refused with `422` and the event is lost.
pub const NOTE_LENGTH_LIMIT: usize = 1024;

/// `note` cut to [`NOTE_LENGTH_LIMIT`] with the cut marked `" ..."`, as kube-scheduler's
/// `truncateMessage` does (at a character boundary: the note stays valid UTF-8).
pub fn truncate_note(mut note: String) -> String {
    const MARK: &str = " ...";
    if note.len() <= NOTE_LENGTH_LIMIT {
        return note;
    }
    let mut end = NOTE_LENGTH_LIMIT - MARK.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note.truncate(end);
    note.push_str(MARK);
    note
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_within_the_limit_are_kept_whole() {
        for note in [String::new(), "x".repeat(NOTE_LENGTH_LIMIT)] {
            assert_eq!(truncate_note(note.clone()), note);
        }
    }

    #[test]
    fn longer_notes_are_cut_to_the_limit_with_the_cut_marked() {
        let cut = truncate_note("x".repeat(NOTE_LENGTH_LIMIT + 1));
        assert_eq!(cut.len(), NOTE_LENGTH_LIMIT);
        assert_eq!(cut, format!("{} ...", "x".repeat(NOTE_LENGTH_LIMIT - 4)));
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        // 'é' is two bytes: the 1020-byte cut would fall inside one.
        let note = format!("x{}", "é".repeat(NOTE_LENGTH_LIMIT));
        let cut = truncate_note(note);
        assert!(cut.len() <= NOTE_LENGTH_LIMIT, "{}", cut.len());
        assert!(cut.ends_with("é ..."));
        assert_eq!(cut.len(), NOTE_LENGTH_LIMIT - 1);
    }
}
