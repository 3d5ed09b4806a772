//! How far a workload has rolled out, read from its status as MTO reads it. No I/O.

use k8s_openapi::api::{
    apps::v1::{DaemonSet, Deployment},
    core::v1::Pod,
};
use kube::ResourceExt;
use multiarch_crd::names::CONDITION_INSPECTOR_REACHABLE;

use crate::component::Rollout;

/// A Deployment's rollout, as MTO judges it: available with one replica, rolled out
/// when every replica is updated, ready and available for the current generation.
pub fn deployment_rollout(deployment: &Deployment) -> Rollout {
    let want = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let status = deployment.status.clone().unwrap_or_default();
    let available = status.available_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    let current_generation =
        status.observed_generation.unwrap_or(0) >= deployment.metadata.generation.unwrap_or(0);
    let rolled_out = updated == want
        && ready == want
        && available == want
        && status.replicas.unwrap_or(0) == want
        && status.unavailable_replicas.unwrap_or(0) == 0
        && current_generation;
    let mut detail = format!(
        "Deployment {}/{} has {available} of {want} replicas available",
        deployment.namespace().unwrap_or_default(),
        deployment.name_any()
    );
    if updated != want {
        detail.push_str(&format!(", {updated} updated"));
    }
    // The controller's own words on why, when it gives them.
    if let Some(problem) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.status == "False" && (c.type_ == "Available" || c.type_ == "Progressing"))
    {
        detail.push_str(&format!(
            " ({}: {})",
            problem.reason.as_deref().unwrap_or(&problem.type_),
            problem.message.as_deref().unwrap_or("")
        ));
    }
    Rollout {
        exists: true,
        available: available > 0,
        rolled_out,
        detail,
    }
}

/// A DaemonSet's rollout: available when a pod is (or no node wants one), rolled out
/// when every node's pod is updated and available.
pub fn daemon_set_rollout(daemon_set: &DaemonSet) -> Rollout {
    let status = daemon_set.status.clone().unwrap_or_default();
    let desired = status.desired_number_scheduled;
    let available = status.number_available.unwrap_or(0);
    let updated = status.updated_number_scheduled.unwrap_or(0);
    let current_generation =
        status.observed_generation.unwrap_or(0) >= daemon_set.metadata.generation.unwrap_or(0);
    Rollout {
        exists: true,
        available: available > 0 || desired == 0,
        rolled_out: updated == desired && available == desired && current_generation,
        detail: format!(
            "DaemonSet {}/{} has {available} of {desired} pods available, {updated} updated",
            daemon_set.namespace().unwrap_or_default(),
            daemon_set.name_any()
        ),
    }
}

/// The scheduler's rollout with what its pods say of the image inspector (the condition
/// [`CONDITION_INSPECTOR_REACHABLE`] each writes on itself): a pod that cannot reach it
/// is named with why; when none reaches it and one says so, the scheduler is not
/// available, whatever its readiness says yet (it cannot place a pod whose images it
/// has not read).
pub fn with_inspector_reach(mut rollout: Rollout, pods: &[Pod]) -> Rollout {
    let mut reached = false;
    let mut unreached = Vec::new();
    // Pods that run: an evicted or finished pod lingers with what it last said.
    let running = |p: &&Pod| {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        p.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Failed" | "Succeeded"))
    };
    for pod in pods.iter().filter(running) {
        let said = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == CONDITION_INSPECTOR_REACHABLE));
        match said {
            Some(c) if c.status == "True" => reached = true,
            Some(c) if c.status == "False" => unreached.push(format!(
                "pod {} cannot reach the image inspector ({}: {})",
                pod.name_any(),
                c.reason.as_deref().unwrap_or("no reason"),
                c.message
                    .as_deref()
                    .unwrap_or("no message")
                    .trim_end_matches('.')
            )),
            _ => {}
        }
    }
    if !unreached.is_empty() {
        unreached.sort();
        rollout.detail = format!("{}; {}", rollout.detail, unreached.join("; "));
        if !reached {
            rollout.available = false;
            rollout.rolled_out = false;
        }
    }
    rollout
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn rollouts_follow_mto_s_rules_and_say_why() {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "multiarch-scheduler", "namespace": "multiarch", "generation": 2},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1, "availableReplicas": 1, "unavailableReplicas": 1,
                       "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability."}]},
        }))
        .unwrap();
        let rollout = deployment_rollout(&deployment);
        assert!(rollout.available && !rollout.rolled_out);
        assert_eq!(
            rollout.detail,
            "Deployment multiarch/multiarch-scheduler has 1 of 2 replicas available (MinimumReplicasUnavailable: Deployment does not have minimum availability.)"
        );
        let none: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "multiarch"},
            "status": {"desiredNumberScheduled": 0, "currentNumberScheduled": 0, "numberMisscheduled": 0, "numberReady": 0},
        }))
        .unwrap();
        assert!(daemon_set_rollout(&none).available);
    }

    fn scheduler_pod(name: &str, condition: Option<(&str, &str, &str)>) -> Pod {
        let conditions: Vec<serde_json::Value> = condition
            .into_iter()
            .map(|(status, reason, message)| json!({"type": CONDITION_INSPECTOR_REACHABLE, "status": status, "reason": reason, "message": message}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "multiarch"},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn a_scheduler_that_cannot_reach_the_inspector_is_not_available() {
        let running = Rollout {
            exists: true,
            available: true,
            rolled_out: true,
            detail: "Deployment multiarch/multiarch-scheduler has 1 of 1 replicas available".into(),
        };
        let unreachable = (
            "False",
            "InspectorUnreachable",
            "cannot reach the image inspector: dns error.",
        );
        let reachable = ("True", "InspectorReachable", "The image inspector answers.");
        let cases = [
            ("no pod says anything", vec![scheduler_pod("a", None)], true),
            (
                "it reaches it",
                vec![scheduler_pod("a", Some(reachable))],
                true,
            ),
            (
                "it cannot",
                vec![scheduler_pod("a", Some(unreachable))],
                false,
            ),
            (
                "one replica reaches it",
                vec![
                    scheduler_pod("a", Some(unreachable)),
                    scheduler_pod("b", Some(reachable)),
                ],
                true,
            ),
        ];
        for (name, pods, available) in cases {
            let rollout = with_inspector_reach(running.clone(), &pods);
            assert_eq!(rollout.available, available, "{name}");
            assert_eq!(rollout.rolled_out, available, "{name}");
        }
        let told = with_inspector_reach(running.clone(), &[scheduler_pod("a", Some(unreachable))]);
        assert_eq!(
            told.detail,
            "Deployment multiarch/multiarch-scheduler has 1 of 1 replicas available; pod a cannot reach the image inspector (InspectorUnreachable: cannot reach the image inspector: dns error)"
        );
        let mut leaving = scheduler_pod("a", Some(unreachable));
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(with_inspector_reach(running.clone(), &[leaving]), running);
        let mut evicted = scheduler_pod("b", Some(unreachable));
        if let Some(status) = evicted.status.as_mut() {
            status.phase = Some("Failed".into());
        }
        assert_eq!(
            with_inspector_reach(
                running.clone(),
                &[evicted, scheduler_pod("a", Some(reachable))]
            ),
            running,
            "an evicted pod's last word is not the scheduler's"
        );
    }
}
