//! Events on pods (and on the ClusterPodPlacementConfig), as users read them in
//! `kubectl describe`: events.k8s.io/v1,
//! reported by one controller name and this replica's identity. An event that repeats
//! (same pod, type, reason, action and note) within six minutes is folded into a series
//! (`x3 over 2m`), as kube's `Recorder` and client-go fold them; but a changed note is a
//! new event. Both of those fold on everything but the note, so `kubectl describe` went
//! on showing a reason that no longer held (kube-scheduler does: checked on
//! kube-apiserver 1.36.2, a pod's `no nodes available to schedule pods` became `(x2)`
//! when the next attempt failed for another reason).

use std::{
    num::NonZeroUsize,
    sync::{Arc, Mutex},
};

use k8s_openapi::{
    api::{core::v1::ObjectReference, events::v1::Event, events::v1::EventSeries},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::{SignedDuration, Timestamp},
};
use kube::{
    Api,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use lru::LruCache;
use serde_json::json;

use crate::event_reason::{EventReason, Severity};

/// How long a published event can be continued as a series (kube's `Recorder`: 6 min).
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);
/// Series remembered at most; the least recently continued go first.
const REMEMBERED_SERIES: usize = 4096;

/// Publishes the events of one role.
#[derive(Clone)]
pub struct EventRecorder {
    client: kube::Client,
    controller: String,
    instance: String,
    series: Arc<Mutex<LruCache<SeriesKey, Published>>>,
}

/// What makes two events the same one repeated.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    namespace: String,
    name: String,
    uid: Option<String>,
    warning: bool,
    reason: String,
    action: String,
    note: String,
}

/// An event written, and how often it has been seen.
#[derive(Clone, Debug)]
struct Published {
    name: String,
    count: i32,
    last: Timestamp,
}

impl EventRecorder {
    /// Events reported as `controller` (`reportingController`), from replica `instance`.
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        EventRecorder {
            client,
            controller: controller.to_owned(),
            instance: instance.to_owned(),
            series: Arc::new(Mutex::new(LruCache::new(
                NonZeroUsize::new(REMEMBERED_SERIES).unwrap_or(NonZeroUsize::MIN),
            ))),
        }
    }

    fn remembered(&self) -> std::sync::MutexGuard<'_, LruCache<SeriesKey, Published>> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes `reason` (of its one severity) about `pod`, or continues its series.
    pub async fn publish(
        &self,
        pod: &ObjectReference,
        reason: EventReason,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let severity = reason.severity();
        let note = truncate_note(note);
        let namespace = pod.namespace.clone().unwrap_or_else(|| "default".into());
        let key = SeriesKey {
            namespace: namespace.clone(),
            name: pod.name.clone().unwrap_or_default(),
            uid: pod.uid.clone(),
            warning: severity == Severity::Warning,
            reason: reason.as_str().to_owned(),
            action: action.to_owned(),
            note: note.clone(),
        };
        let now = Timestamp::now();
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let earlier = self
            .remembered()
            .get(&key)
            .filter(|p| p.last + SERIES_WINDOW > now)
            .cloned();
        if let Some(earlier) = earlier {
            let count = earlier.count.saturating_add(1);
            let series = json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(now),
            }});
            match events
                .patch(
                    &earlier.name,
                    &PatchParams::default(),
                    &Patch::Merge(&series),
                )
                .await
            {
                Ok(_) => {
                    self.remembered().put(
                        key,
                        Published {
                            name: earlier.name,
                            count,
                            last: now,
                        },
                    );
                    return Ok(());
                }
                // Gone (the API server's event TTL): a new one.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let name = format!("{}.{:x}", key.name, now.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            action: Some(action.to_owned()),
            reason: Some(reason.as_str().to_owned()),
            note: Some(note),
            type_: Some(severity.as_str().to_owned()),
            regarding: Some(pod.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        };
        events.create(&PostParams::default(), &event).await?;
        self.remembered().put(
            key,
            Published {
                name,
                count: 1,
                last: now,
            },
        );
        Ok(())
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
