//! Whether the scheduler can inspect images: it probes the inspector service
//! (grpc.health.v1, over the connection its inspections use: the same name resolution,
//! address and TLS), and tells the answer three ways: its readiness (the receiver this
//! returns), the gauge `multiarch_scheduler_inspector_reachable`, and the condition
//! `multiarch.openshift.io/inspector-reachable` on its own pod, where the operator reads
//! why into the ClusterPodPlacementConfig. A scheduler that cannot reach the inspector
//! cannot place a pod whose images it has not read yet.

use std::time::Duration;

use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube::api::{Api, Patch, PatchParams};
use multiarch_crd::names::{
    CONDITION_INSPECTOR_REACHABLE, REASON_INSPECTOR_NOT_REACHED, REASON_INSPECTOR_REACHABLE,
    REASON_INSPECTOR_UNREACHABLE,
};
use multiarch_inspector::{
    grpc::RemoteInspector,
    reachability::{InspectorReach, Reachability},
};
use multiarch_runtime::supervisor::Tasks;
use serde_json::json;
use tokio::sync::watch as signal;
use tracing::{info, warn};

use super::metrics::SchedulerMetrics;

/// How often and how patiently the inspector is asked.
#[derive(Clone, Copy, Debug)]
pub struct ProbeOptions {
    /// Between probes while every one is answered.
    pub steady: Duration,
    /// Between probes while one is not (an outage told, and its end seen, soon).
    pub quick: Duration,
    /// For one probe's answer, connecting included.
    pub deadline: Duration,
    /// Probes in a row not answered that make the inspector unreachable.
    pub threshold: u32,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            steady: Duration::from_secs(10),
            quick: Duration::from_secs(2),
            deadline: Duration::from_secs(5),
            threshold: 3,
        }
    }
}

/// The pod this scheduler runs in (`POD_NAMESPACE`, `POD_NAME`), whose status carries
/// the condition.
#[derive(Clone, Debug)]
pub struct OwnPod {
    pub namespace: String,
    pub name: String,
}

/// Starts probing `inspector` under `tasks` until shutdown; the receiver follows what the
/// probes say (unproven until the first answer).
pub fn start(
    inspector: RemoteInspector,
    options: ProbeOptions,
    own_pod: Option<OwnPod>,
    client: kube::Client,
    metrics: SchedulerMetrics,
    tasks: &Tasks,
) -> signal::Receiver<InspectorReach> {
    let (tx, rx) = signal::channel(InspectorReach::Unproven { why: None });
    let shutdown = tasks.shutdown().clone();
    let mut condition = own_pod.map(|pod| ConditionWriter::new(client, pod));
    tasks.spawn_infallible("inspector probe", async move {
        let mut reachability = Reachability::new(options.threshold);
        loop {
            let answer = inspector.probe(options.deadline).await;
            let reach = reachability.record(answer).clone();
            metrics
                .inspector_reachable
                .set(i64::from(reach.is_reachable()));
            tx.send_if_modified(|told| {
                let changed = *told != reach;
                if changed {
                    log_change(told, &reach);
                    *told = reach.clone();
                }
                changed
            });
            if let Some(writer) = &mut condition {
                writer.write(&reach).await;
            }
            let wait = reachability.next_probe_in(options.steady, options.quick);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    });
    rx
}

fn log_change(before: &InspectorReach, now: &InspectorReach) {
    match now {
        InspectorReach::Reachable => info!("the image inspector answers"),
        InspectorReach::Unreachable { why } => warn!(
            %why,
            "the image inspector is unreachable: pods whose images were not read yet wait, and this scheduler reports not ready"
        ),
        InspectorReach::Unproven { why: Some(why) }
            if matches!(before, InspectorReach::Unproven { why: None }) =>
        {
            warn!(%why, "the image inspector did not answer yet");
        }
        InspectorReach::Unproven { .. } => {}
    }
}

/// The condition as the pod should carry it: (status, reason, message); `None` before
/// any probe was asked.
fn condition_of(reach: &InspectorReach) -> Option<(&'static str, &'static str, String)> {
    match reach {
        InspectorReach::Reachable => Some((
            "True",
            REASON_INSPECTOR_REACHABLE,
            "The image inspector answers.".to_owned(),
        )),
        InspectorReach::Unreachable { why } => Some((
            "False",
            REASON_INSPECTOR_UNREACHABLE,
            format!("{why}; pods whose images were not read yet wait until it answers."),
        )),
        InspectorReach::Unproven { why: Some(why) } => Some((
            "False",
            REASON_INSPECTOR_NOT_REACHED,
            format!("Not reached since this scheduler started: {why}."),
        )),
        InspectorReach::Unproven { why: None } => None,
    }
}

/// Writes the condition on the scheduler's own pod when it changes; a write that fails
/// is logged and made again after the next probe.
struct ConditionWriter {
    pods: Api<Pod>,
    name: String,
    /// What the pod carries: (status, reason, message) and since when that status.
    written: Option<((&'static str, &'static str, String), Timestamp)>,
}

impl ConditionWriter {
    fn new(client: kube::Client, pod: OwnPod) -> Self {
        ConditionWriter {
            pods: Api::namespaced(client, &pod.namespace),
            name: pod.name,
            written: None,
        }
    }

    async fn write(&mut self, reach: &InspectorReach) {
        let Some(wanted) = condition_of(reach) else {
            return;
        };
        if self.written.as_ref().is_some_and(|(w, _)| *w == wanted) {
            return;
        }
        // The transition time moves only when the status does.
        let since = match &self.written {
            Some(((status, _, _), since)) if *status == wanted.0 => *since,
            _ => Timestamp::now(),
        };
        let (status, reason, message) = &wanted;
        let patch = json!({"status": {"conditions": [{
            "type": CONDITION_INSPECTOR_REACHABLE, "status": status, "reason": reason,
            "message": message, "lastTransitionTime": since.to_string(),
        }]}});
        match self
            .pods
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            Ok(_) => self.written = Some((wanted, since)),
            Err(error) => warn!(
                pod = %self.name, %error,
                "cannot write the inspector-reachable condition on the scheduler's pod; written again after the next probe"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_says_what_the_probes_say() {
        assert_eq!(condition_of(&InspectorReach::Unproven { why: None }), None);
        let reachable = condition_of(&InspectorReach::Reachable);
        assert_eq!(
            reachable.map(|(s, r, _)| (s, r)),
            Some(("True", REASON_INSPECTOR_REACHABLE))
        );
        let down = condition_of(&InspectorReach::Unreachable {
            why: "cannot reach the image inspector: dns error".into(),
        });
        assert_eq!(
            down,
            Some((
                "False",
                REASON_INSPECTOR_UNREACHABLE,
                "cannot reach the image inspector: dns error; pods whose images were not read yet wait until it answers.".into()
            ))
        );
        let starting = condition_of(&InspectorReach::Unproven {
            why: Some("connection refused".into()),
        });
        assert_eq!(
            starting.map(|(s, r, _)| (s, r)),
            Some(("False", REASON_INSPECTOR_NOT_REACHED))
        );
    }
}
