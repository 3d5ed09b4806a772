//! Test pods and what the cluster says about them.

use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use crate::{
    kubectl::Kubectl,
    wait::{self, Check},
};

/// A pod that sleeps in `image` (the busybox test images have `sleep`), with small
/// requests and a short grace period (sleep as PID 1 ignores SIGTERM).
pub fn sleeper(namespace: &str, name: &str, image: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"e2e": "sleeper"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app", "image": image, "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "5m", "memory": "8Mi"}},
            }],
        },
    })
}

/// A Deployment of `replicas` sleepers.
pub fn deployment(namespace: &str, name: &str, image: &str, replicas: u32) -> Value {
    let pod = sleeper(namespace, name, image);
    let template = json!({"metadata": {"labels": {"app": name}}, "spec": pod["spec"]});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    })
}

pub fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

pub fn name(pod: &Value) -> &str {
    pod["metadata"]["name"].as_str().unwrap_or("")
}

/// Running with every container ready.
pub fn running_and_ready(pod: &Value) -> bool {
    phase(pod) == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c["ready"] == true))
}

/// The events about `pod` (core v1 view, which shows events.k8s.io events too), oldest
/// first, as `(reason, reporting component, message)`.
pub fn events(
    kubectl: &Kubectl,
    namespace: &str,
    pod: &str,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let selector = format!("involvedObject.kind=Pod,involvedObject.name={pod}");
    let mut items = kubectl.items(&["events", "-n", namespace, "--field-selector", &selector])?;
    items.sort_by_key(|e| {
        e["eventTime"]
            .as_str()
            .or(e["lastTimestamp"].as_str())
            .unwrap_or("")
            .to_owned()
    });
    Ok(items
        .iter()
        .map(|e| {
            let from = e["reportingComponent"]
                .as_str()
                .filter(|s| !s.is_empty())
                .or(e["source"]["component"].as_str())
                .unwrap_or("")
                .to_owned();
            (
                e["reason"].as_str().unwrap_or("").to_owned(),
                from,
                e["message"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect())
}

/// Waits for an event `reason` about `pod`; its `(component, message)`.
pub fn wait_event(
    kubectl: &Kubectl,
    namespace: &str,
    pod: &str,
    reason: &str,
    deadline: Duration,
) -> anyhow::Result<(String, String)> {
    wait::until(
        &format!("event {reason} on {namespace}/{pod}"),
        deadline,
        || {
            let all = events(kubectl, namespace, pod)?;
            Ok(match all.iter().find(|(r, _, _)| r == reason) {
                Some((_, from, message)) => Check::Done((from.clone(), message.clone())),
                None => Check::NotYet(format!(
                    "events so far: {:?}",
                    all.iter().map(|(r, _, _)| r.as_str()).collect::<Vec<_>>()
                )),
            })
        },
    )
}

/// Waits until every pod of `namespace` matching `selector` is running and ready, and
/// there are `count` of them; the pods.
pub fn wait_all_running(
    kubectl: &Kubectl,
    namespace: &str,
    selector: &str,
    count: usize,
    deadline: Duration,
) -> anyhow::Result<Vec<Value>> {
    wait::until(
        &format!("{count} pods {selector} running in {namespace}"),
        deadline,
        || {
            let pods = kubectl.items(&["pods", "-n", namespace, "-l", selector])?;
            let not: Vec<String> = pods
                .iter()
                .filter(|p| !running_and_ready(p))
                .map(|p| format!("{} {} {}", name(p), phase(p), waiting_reason(p)))
                .collect();
            Ok(if pods.len() == count && not.is_empty() {
                Check::Done(pods)
            } else {
                Check::NotYet(format!("{} pods, not running: {not:?}", pods.len()))
            })
        },
    )
}

/// Why a pod's first container waits, or its PodScheduled message: for error reports.
pub fn waiting_reason(pod: &Value) -> String {
    if let Some(reason) =
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str()
    {
        return reason.to_owned();
    }
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
        })
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// The required `kubernetes.io/arch` values of the pod's first node selector term.
pub fn required_architectures(pod: &Value) -> Vec<String> {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
        ["matchExpressions"]
        .as_array()
        .and_then(|es| es.iter().find(|e| e["key"] == "kubernetes.io/arch"))
        .and_then(|e| e["values"].as_array())
        .map(|vs| vs.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// The pod's scheduling gates.
pub fn gates(pod: &Value) -> Vec<String> {
    pod["spec"]["schedulingGates"]
        .as_array()
        .map(|gs| {
            gs.iter()
                .filter_map(|g| g["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `kubectl get pod` for one pod.
pub fn get(kubectl: &Kubectl, namespace: &str, name: &str) -> anyhow::Result<Value> {
    kubectl
        .json(&["get", "pod", "-n", namespace, name])
        .with_context(|| format!("pod {namespace}/{name}"))
}
