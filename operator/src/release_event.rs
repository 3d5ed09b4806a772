//! The event a released pod gets: why the operator ungated, deleted or recreated it.

use multiarch_runtime::{
    event_reason::EventReason,
    event_recorder::{EventRecorder, pod_reference},
};
use tracing::warn;

use crate::observe::PodRef;

pub(crate) async fn publish(
    events: &EventRecorder,
    pod: &PodRef,
    reason: EventReason,
    note: String,
) {
    let reference = pod_reference(&pod.namespace, &pod.name, Some(pod.uid.clone()));
    if let Err(e) = events.publish(&reference, reason, "Release", note).await {
        warn!(pod = %pod, error = %e, "cannot publish the event");
    }
}
