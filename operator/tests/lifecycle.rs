//! Switching modes, turning the exec-format-error monitor on and off, and uninstalling:
//! never a pod routed to a component that is not there, none left gated or waiting for a
//! scheduler that is gone.

#![allow(clippy::unwrap_used)]

mod common;
use multiarch_test_support::rbac;

use std::{sync::Arc, time::Duration};

use common::*;
use kube::{Api, api::DeleteParams};
use multiarch_crd::ClusterPodPlacementConfig;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_operator::install;
use serde_json::{Value, json};

/// The test's own requests the operator never makes (creating and deleting the
/// ClusterPodPlacementConfig); its spec patches share the operator's finalizer patch.
fn by_the_test(request: &str) -> bool {
    request == "POST /apis/multiarch.openshift.io/v1beta1/clusterpodplacementconfigs"
}

fn assert_operator_requests_granted(server: &FakeApiServer, test_requests: &[&str]) {
    let rules = rbac::rules(&[
        install::operator_cluster_rules(),
        install::operator_namespace_rules(),
    ]);
    let mut requests = server.requests();
    for own in test_requests {
        if let Some(i) = requests.iter().position(|r| r == own) {
            requests.remove(i);
        }
    }
    requests.retain(|r| !by_the_test(r));
    rbac::assert_granted(&rules, &requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_switch_replaces_the_route_and_keeps_the_scheduler_while_pods_wait() {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(3)).await;
    assert_eq!(route(&server).as_deref(), Some("/mutate-pods/scheduler"));
    server.apply(
        "pods",
        pending_pod("shop", "web-1", "multiarch-scheduler", Some("web")),
    );
    server.apply(
        "pods",
        pending_pod("shop", "batch", "multiarch-scheduler", None),
    );
    server.apply(
        "pods",
        pending_pod("shop", "placed", "multiarch-scheduler", None),
    );

    patch_spec(&server, json!({"placement": {"mode": "SchedulingGate"}})).await;
    eventually("the gate route", || {
        route(&server).as_deref() == Some("/mutate-pods/gate")
    })
    .await;
    // The scheduler stays while pods wait for it, and the status says so.
    assert!(get(&server, "apps/deployments", "multiarch-scheduler").is_some());
    eventually("the drain in Progressing", || {
        condition(&server, "Progressing").is_some_and(|c| {
            c["status"] == "True"
                && c["message"]
                    .as_str()
                    .unwrap()
                    .contains("3 pending pods still wait for the scheduler")
        })
    })
    .await;
    // One is placed meanwhile (the scheduler bound it).
    let mut placed = server.get("pods", "shop", "placed").unwrap();
    placed["spec"]["nodeName"] = json!("amd-1");
    placed["status"]["phase"] = json!("Running");
    server.apply("pods", placed);
    // The others outlast the drain timeout: the operator releases them, then removes the
    // scheduler; never the other way round.
    loop {
        if get(&server, "apps/deployments", "multiarch-scheduler").is_none() {
            assert_eq!(
                waiting_for_scheduler(&server),
                [] as [String; 0],
                "the scheduler went first"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        server.get("pods", "shop", "web-1").is_none(),
        "deleted, for its ReplicaSet to recreate"
    );
    let batch = server.get("pods", "shop", "batch").unwrap();
    assert_eq!(batch["spec"]["schedulerName"], "default-scheduler");
    assert!(batch["metadata"]["annotations"]["multiarch.openshift.io/recreated-from"].is_string());
    assert_eq!(server.list("configmaps").len(), 0, "the journal is cleared");
    assert!(server.get("pods", "shop", "placed").is_some());
    for name in [
        "multiarch-gate-controller",
        "multiarch-webhook",
        "multiarch-inspector",
    ] {
        assert!(get(&server, "apps/deployments", name).is_some(), "{name}");
    }
    eventually("the scheduler's other objects gone", || {
        [
            "policy/poddisruptionbudgets",
            "services",
            "serviceaccounts",
            "rbac.authorization.k8s.io/clusterroles",
        ]
        .iter()
        .all(|kind| get(&server, kind, "multiarch-scheduler").is_none())
    })
    .await;

    // Back to scheduler mode: the gate route stays until the scheduler is available.
    rollouts.hold("multiarch-scheduler");
    patch_spec(&server, json!({"placement": {"mode": "Scheduler"}})).await;
    eventually("the scheduler again", || {
        get(&server, "apps/deployments", "multiarch-scheduler").is_some()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(route(&server).as_deref(), Some("/mutate-pods/gate"));
    eventually("a Progressing message about the switch", || {
        condition(&server, "Progressing").is_some_and(|c| {
            c["message"]
                .as_str()
                .unwrap()
                .contains("switching to scheduler mode")
        })
    })
    .await;
    rollouts.release("multiarch-scheduler");
    eventually("the scheduler route", || {
        route(&server).as_deref() == Some("/mutate-pods/scheduler")
    })
    .await;
    assert_operator_requests_granted(&server, &[]);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_scheduler_strands_no_pod_routed_to_its_old_name() {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    let old = "multiarch-scheduler";
    server.apply("pods", pending_pod("shop", "web-1", old, Some("web")));
    server.apply("pods", pending_pod("shop", "batch", old, None));
    let mut bound = pending_pod("shop", "bound", old, None);
    bound["spec"]["nodeName"] = json!("amd-1");
    bound["status"]["phase"] = json!("Running");
    server.apply("pods", bound);

    rollouts.hold("multiarch-scheduler");
    patch_spec(
        &server,
        json!({"placement": {"schedulerName": "arch-aware"}}),
    )
    .await;
    let deployment = || get(&server, "apps/deployments", "multiarch-scheduler").unwrap();
    eventually("the renamed scheduler's Deployment", || {
        let d = deployment();
        d["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--scheduler-name=arch-aware"))
    })
    .await;
    assert_eq!(
        deployment()["metadata"]["annotations"]["multiarch.openshift.io/previous-scheduler-names"],
        old
    );
    // Until the renamed scheduler runs, the old one may still place them: left alone.
    let passes = operator.passes();
    eventually("two more passes", || operator.passes() >= passes + 2).await;
    assert_eq!(waiting_for_scheduler(&server).len(), 2);
    // A replica of the webhook that had not read the rename yet routes one more.
    server.apply("pods", pending_pod("shop", "late", old, None));

    rollouts.release("multiarch-scheduler");
    eventually("nothing pending under the old name", || {
        waiting_for_scheduler(&server).is_empty()
    })
    .await;
    assert!(
        server.get("pods", "shop", "web-1").is_none(),
        "deleted, for its ReplicaSet to recreate through admission"
    );
    for name in ["batch", "late"] {
        let pod = server.get("pods", "shop", name).unwrap();
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler", "{name}");
        assert!(
            pod["metadata"]["annotations"]["multiarch.openshift.io/recreated-from"].is_string()
        );
    }
    assert_eq!(
        server.get("pods", "shop", "bound").unwrap()["spec"]["schedulerName"],
        old,
        "a bound pod is never touched"
    );
    let notes: Vec<String> = server
        .list("events.k8s.io/events")
        .iter()
        .filter(|e| e["regarding"]["name"] == "batch")
        .map(|e| e["note"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("renamed the scheduler from multiarch-scheduler to arch-aware")),
        "{notes:?}"
    );
    assert_operator_requests_granted(&server, &[]);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_schedulers_pods_are_never_released_whatever_the_configuration_names() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    // Pods waiting for kube-scheduler, and a configuration stored before the CRD refused
    // its name (the API is bypassed: the schema would refuse it now).
    server.apply(
        "pods",
        pending_pod("shop", "kube-1", "default-scheduler", Some("web")),
    );
    server.apply(
        "pods",
        pending_pod("shop", "kube-2", "default-scheduler", None),
    );
    let mut stored = get(
        &server,
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "cluster",
    )
    .unwrap();
    stored["spec"]["placement"] = json!({"schedulerName": "default-scheduler"});
    server.apply("multiarch.openshift.io/clusterpodplacementconfigs", stored);
    eventually("Degraded naming the refused name", || {
        condition(&server, "Degraded").is_some_and(|c| {
            c["status"] == "True"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("schedulerName may not be default-scheduler"))
        })
    })
    .await;
    let deployment = || get(&server, "apps/deployments", "multiarch-scheduler").unwrap();
    let args = |d: Value| d["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args(deployment())
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a != "--scheduler-name=default-scheduler"),
        "multiarch's scheduler never runs as kube-scheduler"
    );
    // Renamed away again: every name the scheduler placed under is released once the
    // renamed one runs; kube-scheduler's pods are not among them.
    patch_spec(
        &server,
        json!({"placement": {"schedulerName": "arch-aware"}}),
    )
    .await;
    eventually("the renamed scheduler's Deployment", || {
        args(deployment())
            .as_array()
            .unwrap()
            .contains(&json!("--scheduler-name=arch-aware"))
    })
    .await;
    server.apply(
        "pods",
        pending_pod("shop", "ours", "multiarch-scheduler", None),
    );
    eventually("multiarch's own pod released", || {
        server.get("pods", "shop", "ours").is_some_and(|p| {
            p["metadata"]["annotations"]["multiarch.openshift.io/recreated-from"].is_string()
        })
    })
    .await;
    for name in ["kube-1", "kube-2"] {
        let pod = server.get("pods", "shop", name).expect("never deleted");
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler", "{name}");
        assert!(
            pod["metadata"]["annotations"]["multiarch.openshift.io/recreated-from"].is_null(),
            "{name} was recreated"
        );
    }
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exec_format_error_monitor_comes_and_goes_with_its_plugin() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(
        &server,
        json!({"plugins": {"execFormatErrorMonitor": {"enabled": true}}}),
        Duration::from_secs(600),
    )
    .await;
    for (kind, name) in [
        ("apps/daemonsets", "multiarch-enoexec-daemon"),
        ("apps/deployments", "multiarch-enoexec-handler"),
        (
            "rbac.authorization.k8s.io/roles",
            "multiarch-enoexec-daemon",
        ),
        (
            "rbac.authorization.k8s.io/roles",
            "multiarch-enoexec-handler-lease",
        ),
        ("serviceaccounts", "multiarch-enoexec-daemon"),
    ] {
        assert!(get(&server, kind, name).is_some(), "{kind} {name}");
    }
    assert!(
        get(
            &server,
            "rbac.authorization.k8s.io/clusterroles",
            "multiarch-enoexec-handler"
        )
        .is_some()
    );
    let daemon = get(&server, "apps/daemonsets", "multiarch-enoexec-daemon").unwrap();
    assert_eq!(
        daemon["spec"]["template"]["spec"]["tolerations"][0]["operator"],
        "Exists"
    );
    eventually("the monitor in the status", || {
        condition(&server, "ExecFormatErrorMonitorNotRolledOut")
            .is_some_and(|c| c["status"] == "False")
    })
    .await;

    for name in ["e1", "e2"] {
        server.apply(
            "multiarch.openshift.io/enoexecevents",
            json!({"metadata": {"name": name, "namespace": NS}, "status": {"nodeName": "amd-1"}}),
        );
    }
    patch_spec(
        &server,
        json!({"plugins": {"execFormatErrorMonitor": {"enabled": false}}}),
    )
    .await;
    // The daemon goes first; the handler stays while reports wait for it.
    eventually("the daemon gone", || {
        get(&server, "apps/daemonsets", "multiarch-enoexec-daemon").is_none()
    })
    .await;
    assert!(get(&server, "apps/deployments", "multiarch-enoexec-handler").is_some());
    eventually("Progressing names the reports", || {
        condition(&server, "Progressing").is_some_and(|c| {
            c["message"]
                .as_str()
                .unwrap()
                .contains("2 exec-format-error reports")
        })
    })
    .await;
    // The handler handles them; then it goes too.
    for name in ["e1", "e2"] {
        server.delete("multiarch.openshift.io/enoexecevents", NS, name);
    }
    eventually("the handler and its access gone", || {
        get(&server, "apps/deployments", "multiarch-enoexec-handler").is_none()
            && get(
                &server,
                "rbac.authorization.k8s.io/clusterroles",
                "multiarch-enoexec-handler",
            )
            .is_none()
            && get(
                &server,
                "rbac.authorization.k8s.io/roles",
                "multiarch-enoexec-daemon",
            )
            .is_none()
    })
    .await;
    assert!(
        get(&server, "apps/deployments", "multiarch-webhook").is_some(),
        "the rest stays"
    );
    operator.stop().await;
}

/// What an uninstall must not strand: a PodPlacementConfig, two gated pods, two pods
/// waiting for the scheduler (one with a controller), an exec-format-error report.
fn leave_work_for_the_uninstall(server: &FakeApiServer) {
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "prefs", "namespace": "shop"}, "spec": {"priority": 1, "plugins": {}}}),
    );
    server.apply("pods", gated_pod("shop", "gated-1"));
    server.apply("pods", gated_pod("lab", "gated-2"));
    server.apply(
        "pods",
        pending_pod("shop", "web-1", "multiarch-scheduler", Some("web")),
    );
    server.apply(
        "pods",
        pending_pod("shop", "batch", "multiarch-scheduler", None),
    );
    server.apply(
        "multiarch.openshift.io/enoexecevents",
        json!({"metadata": {"name": "left", "namespace": NS}}),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_strands_no_pod_and_removes_everything() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(
        &server,
        json!({"plugins": {"execFormatErrorMonitor": {"enabled": true}}}),
        Duration::from_secs(2),
    )
    .await;
    leave_work_for_the_uninstall(&server);

    // (The validating webhook would refuse this; it fails open, and the finalizer holds.)
    Api::<ClusterPodPlacementConfig>::all(client(&server))
        .delete("cluster", &DeleteParams::default())
        .await
        .unwrap();
    eventually("Deprovisioning naming the PodPlacementConfig", || {
        condition(&server, "Deprovisioning").is_some_and(|c| {
            c["status"] == "True" && c["message"].as_str().unwrap().contains("shop/prefs")
        })
    })
    .await;
    assert!(
        route(&server).is_some(),
        "pods stay routed while PodPlacementConfigs exist"
    );
    server.delete(
        "multiarch.openshift.io/podplacementconfigs",
        "shop",
        "prefs",
    );

    // Routing goes first; the pods are left to the gate controller and the scheduler for
    // the drain timeout, then released by the operator.
    eventually("the route gone", || route(&server).is_none()).await;
    eventually("a waiting message", || {
        condition(&server, "Deprovisioning").is_some_and(|c| {
            c["message"]
                .as_str()
                .unwrap()
                .contains("2 gated pods to be processed by the gate controller")
        })
    })
    .await;
    assert!(get(&server, "apps/deployments", "multiarch-scheduler").is_some());
    cppc_gone(&server).await;
    assert_eq!(gated(&server), [] as [String; 0]);
    assert_eq!(waiting_for_scheduler(&server), [] as [String; 0]);
    let ungated = server.get("pods", "lab", "gated-2").unwrap();
    assert_eq!(
        ungated["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"],
        "removed"
    );
    assert_eq!(
        server.get("pods", "shop", "batch").unwrap()["spec"]["schedulerName"],
        "default-scheduler"
    );
    assert!(server.get("pods", "shop", "web-1").is_none());
    assert!(
        server
            .list("multiarch.openshift.io/enoexecevents")
            .is_empty()
    );
    // Every operand is gone; what the operator keeps for itself (the CA) stays.
    for kind in [
        "apps/deployments",
        "apps/daemonsets",
        "serviceaccounts",
        "policy/poddisruptionbudgets",
        "networking.k8s.io/networkpolicies",
        "rbac.authorization.k8s.io/roles",
        "rbac.authorization.k8s.io/rolebindings",
        "services",
    ] {
        assert_eq!(server.list(kind), [] as [Value; 0], "{kind} left");
    }
    assert_eq!(
        server.list("rbac.authorization.k8s.io/clusterroles"),
        [] as [Value; 0]
    );
    assert!(server.get("secrets", NS, "multiarch-webhook-tls").is_none());
    assert!(server.get("secrets", NS, "multiarch-ca").is_some());
    // Each released pod was told why.
    let reasons: Vec<String> = server
        .list("events.k8s.io/events")
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["reason"].as_str().unwrap_or(""),
                e["regarding"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    for expected in [
        "ArchAwareSchedGateRemovedByOperator gated-1",
        "RecreatedForDefaultScheduler web-1",
        "RecreatedForDefaultScheduler batch",
    ] {
        assert!(
            reasons.iter().any(|r| r == expected),
            "{expected} in {reasons:?}"
        );
    }
    assert_operator_requests_granted(
        &server,
        &["DELETE /apis/multiarch.openshift.io/v1beta1/clusterpodplacementconfigs/cluster"],
    );
    operator.stop().await;
}

/// A prometheus-operator CRD (`monitoring.coreos.com/v1`) of `kind`, as far as the API
/// server needs it.
fn monitoring_crd(kind: &str) -> Value {
    let singular = kind.to_lowercase();
    let plural = format!("{singular}s");
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.monitoring.coreos.com")},
        "spec": {
            "group": "monitoring.coreos.com", "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": singular, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

/// The sorted names of the `monitoring.coreos.com` objects of `plural`.
fn monitoring_objects(server: &FakeApiServer, plural: &str) -> Vec<String> {
    let mut names: Vec<String> = server
        .list(&format!("monitoring.coreos.com/{plural}"))
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn rules(server: &FakeApiServer) -> Vec<String> {
    monitoring_objects(server, "prometheusrules")
}

fn monitors(server: &FakeApiServer) -> Vec<String> {
    monitoring_objects(server, "servicemonitors")
}

/// Seen on a real cluster without prometheus-operator: the API server answers a path of an
/// API it does not serve with a plain `404 page not found`, which is no object's absence,
/// and every reconcile failed deleting a ServiceMonitor it did not want: no status, and an
/// uninstall that never finished. Optional APIs are found by discovery instead: without
/// them nothing of theirs is read, written or deleted; once served, their objects come
/// (the CRD's arrival wakes the operator), and an uninstall removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_monitors_follow_the_api_the_cluster_serves() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(
        &server,
        json!({"plugins": {"execFormatErrorMonitor": {"enabled": true}}}),
        Duration::from_secs(2),
    )
    .await;
    let monitoring: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.contains("monitoring.coreos.com"))
        .collect();
    assert!(!monitoring.is_empty(), "discovery was never asked");
    assert!(
        monitoring
            .iter()
            .all(|r| r == "GET /apis/monitoring.coreos.com/v1"),
        "requests for an API the cluster does not serve: {monitoring:?}"
    );

    server.apply(
        "apiextensions.k8s.io/customresourcedefinitions",
        monitoring_crd("ServiceMonitor"),
    );
    eventually("a ServiceMonitor per component with metrics", || {
        monitors(&server).len() == 7
    })
    .await;
    assert_eq!(
        monitors(&server),
        [
            "multiarch-enoexec-daemon",
            "multiarch-enoexec-handler",
            "multiarch-gate-controller",
            "multiarch-inspector",
            "multiarch-operator",
            "multiarch-scheduler",
            "multiarch-webhook"
        ]
    );
    assert!(
        rules(&server).is_empty(),
        "a PrometheusRule without its API"
    );

    // The alerts follow their own API the same way.
    server.apply(
        "apiextensions.k8s.io/customresourcedefinitions",
        monitoring_crd("PrometheusRule"),
    );
    eventually("the PrometheusRule of multiarch's alerts", || {
        rules(&server) == ["multiarch"]
    })
    .await;
    let rule = &server.list("monitoring.coreos.com/prometheusrules")[0];
    assert_eq!(
        rule["spec"]["groups"][0]["rules"].as_array().unwrap().len(),
        multiarch_operator::install::ALERTS.len()
    );

    Api::<ClusterPodPlacementConfig>::all(client(&server))
        .delete("cluster", &DeleteParams::default())
        .await
        .unwrap();
    cppc_gone(&server).await;
    assert_eq!(monitors(&server), [] as [String; 0]);
    assert_eq!(rules(&server), [] as [String; 0]);
    operator.stop().await;
}
