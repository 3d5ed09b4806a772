//! Uninstall and mode switches never strand, lose or force-kill a pod, and one failing
//! object never stops the operator: pods routed while a removed route settles are still
//! released; releases that race a change read the pod again; a pod bound meanwhile is
//! never deleted; a pod the API server would not create again is left and named; a
//! journaled pod that cannot be created does not stop the reconcile; the drain clock
//! starts when the drain does.

#![allow(clippy::unwrap_used)]

mod common;

use std::{sync::Arc, time::Duration};

use common::*;
use kube::{Api, api::DeleteParams};
use multiarch_crd::ClusterPodPlacementConfig;
use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault, Method};
use serde_json::{Value, json};

const SCHEDULER: &str = "multiarch-scheduler";

async fn delete_cppc(server: &FakeApiServer) {
    Api::<ClusterPodPlacementConfig>::all(client(server))
        .delete("cluster", &DeleteParams::default())
        .await
        .unwrap();
}

/// Events as `reason name`.
fn events(server: &FakeApiServer) -> Vec<String> {
    server
        .list("events.k8s.io/events")
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["reason"].as_str().unwrap_or(""),
                e["regarding"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

fn requests_to(server: &FakeApiServer, request: &str) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.as_str() == request)
        .count()
}

fn deprovisioning_says(server: &FakeApiServer, words: &str) -> bool {
    condition(server, "Deprovisioning")
        .is_some_and(|c| c["message"].as_str().unwrap_or("").contains(words))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_releases_pods_routed_while_the_removed_route_settles() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed_with(
        &server,
        json!({}),
        Duration::from_secs(2),
        Duration::from_secs(6),
    )
    .await;
    let lists = || {
        server
            .requests()
            .iter()
            .filter(|r| r.starts_with("GET /api/v1/pods"))
            .count()
    };
    let before = lists();
    delete_cppc(&server).await;
    eventually("the route gone", || route(&server).is_none()).await;
    // Admitted by reviews already under way when the configuration went, after the
    // operator's first look for gated and waiting pods.
    eventually("the operator's look for pods", || lists() >= before + 2).await;
    server.apply("pods", pending_pod("shop", "late", SCHEDULER, None));
    server.apply("pods", gated_pod("shop", "late-gated"));
    assert!(
        get(&server, "apps/deployments", SCHEDULER).is_some(),
        "the scheduler serves its route while it settles"
    );
    cppc_gone(&server).await;
    assert_eq!(waiting_for_scheduler(&server), [] as [String; 0]);
    assert_eq!(gated(&server), [] as [String; 0]);
    assert_eq!(
        server.get("pods", "shop", "late").unwrap()["spec"]["schedulerName"],
        "default-scheduler"
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_away_from_the_scheduler_keeps_it_until_its_route_settles() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed_with(
        &server,
        json!({}),
        Duration::from_secs(2),
        Duration::from_secs(6),
    )
    .await;
    patch_spec(&server, json!({"placement": {"mode": "SchedulingGate"}})).await;
    eventually("the gate route", || {
        route(&server).as_deref() == Some("/mutate-pods/gate")
    })
    .await;
    // Routed to the scheduler by a review that read the configuration before the switch.
    server.apply("pods", pending_pod("shop", "late", SCHEDULER, Some("web")));
    assert!(get(&server, "apps/deployments", SCHEDULER).is_some());
    // Released past the drain timeout, then the scheduler goes.
    eventually("the late pod released", || {
        server.get("pods", "shop", "late").is_none()
    })
    .await;
    eventually("the scheduler removed", || {
        get(&server, "apps/deployments", SCHEDULER).is_none()
    })
    .await;
    assert!(
        events(&server)
            .iter()
            .any(|e| e == "RecreatedForDefaultScheduler late")
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_at_its_pod_quota_still_gets_its_pods_released() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed_with(
        &server,
        json!({}),
        Duration::from_secs(2),
        Duration::from_secs(1),
    )
    .await;
    // Two pods waiting for the scheduler in a namespace whose quota they use up: a copy
    // cannot be created while its original still counts.
    server.apply(
        "resourcequotas",
        json!({"metadata": {"name": "pod-count", "namespace": "shop"}, "spec": {"hard": {"pods": "2"}}}),
    );
    server.apply("pods", pending_pod("shop", "bare", SCHEDULER, None));
    server.apply(
        "pods",
        pending_pod("shop", "replica", SCHEDULER, Some("web")),
    );
    patch_spec(&server, json!({"placement": {"mode": "SchedulingGate"}})).await;
    eventually("both released", || {
        server.get("pods", "shop", "replica").is_none()
            && server
                .get("pods", "shop", "bare")
                .is_some_and(|p| p["spec"]["schedulerName"] == "default-scheduler")
    })
    .await;
    // The events are written after the pods they tell of, each a moment later.
    eventually("both recreations told", || {
        let names = events(&server);
        names
            .iter()
            .any(|e| e == "RecreatedForDefaultScheduler bare")
            && names
                .iter()
                .any(|e| e == "RecreatedForDefaultScheduler replica")
    })
    .await;
    let names = events(&server);
    assert!(
        !names
            .iter()
            .any(|e| e.starts_with("CannotRecreateForDefaultScheduler")),
        "{names:?}"
    );
    eventually("the scheduler removed", || {
        get(&server, "apps/deployments", SCHEDULER).is_none()
    })
    .await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ungate_that_races_a_change_reads_the_pod_again_and_keeps_the_change() {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    server.apply("pods", gated_pod("shop", "raced"));
    // No gate controller: the operator releases the pod at once.
    rollouts.hold("multiarch-gate-controller");
    server.inject(Fault::new(
        Some(Method::PATCH),
        "/api/v1/namespaces/shop/pods/raced",
        Effect::Hang,
    ));
    delete_cppc(&server).await;
    let patch = "PATCH /api/v1/namespaces/shop/pods/raced";
    eventually("the operator's ungate under way", || {
        requests_to(&server, patch) == 1
    })
    .await;
    // The gate controller (or anyone) relabels the pod meanwhile.
    let mut changed = server.get("pods", "shop", "raced").unwrap();
    changed["metadata"]["labels"]["multiarch.openshift.io/image-inspect-error-count"] = json!("2");
    server.apply("pods", changed);
    server.clear_faults();
    cppc_gone(&server).await;
    let pod = server.get("pods", "shop", "raced").unwrap();
    assert!(
        pod["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/image-inspect-error-count"], "2",
        "the change made meanwhile is kept"
    );
    assert_eq!(
        requests_to(&server, patch),
        2,
        "read again after the conflict"
    );
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.starts_with("PUT /api/v1/namespaces/shop/pods")),
        "no whole-object write of a pod"
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_bound_while_it_is_being_released_is_never_deleted() {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    server.apply("pods", pending_pod("shop", "db-0", SCHEDULER, Some("db")));
    rollouts.hold(SCHEDULER);
    server.inject(Fault::new(
        Some(Method::DELETE),
        "/api/v1/namespaces/shop/pods/db-0",
        Effect::Hang,
    ));
    delete_cppc(&server).await;
    let delete = "DELETE /api/v1/namespaces/shop/pods/db-0";
    eventually("the operator's delete under way", || {
        requests_to(&server, delete) == 1
    })
    .await;
    // The scheduler binds it meanwhile: it starts on its node.
    let mut bound = server.get("pods", "shop", "db-0").unwrap();
    bound["spec"]["nodeName"] = json!("amd-1");
    bound["status"]["phase"] = json!("Running");
    server.apply("pods", bound);
    server.clear_faults();
    cppc_gone(&server).await;
    let pod = server.get("pods", "shop", "db-0").unwrap();
    assert_eq!(pod["spec"]["nodeName"], "amd-1");
    assert!(pod["metadata"]["deletionTimestamp"].is_null(), "{pod}");
    assert_eq!(requests_to(&server, delete), 1, "never deleted once bound");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_the_api_server_would_not_create_again_is_left_and_named() {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    server.apply("pods", pending_pod("locked", "batch", SCHEDULER, None));
    rollouts.hold(SCHEDULER);
    // A policy now refuses this namespace's pods (as a raised PodSecurity level would).
    server.apply(
        "admissionregistration.k8s.io/validatingadmissionpolicies",
        json!({"metadata": {"name": "lock-down"}, "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "object.metadata.namespace != 'locked'",
                             "message": "namespace locked admits no new pods", "reason": "Forbidden"}]}}),
    );
    server.apply(
        "admissionregistration.k8s.io/validatingadmissionpolicybindings",
        json!({"metadata": {"name": "lock-down"}, "spec": {"policyName": "lock-down", "validationActions": ["Deny"]}}),
    );
    delete_cppc(&server).await;
    eventually("the uninstall naming the pod it cannot recreate", || {
        deprovisioning_says(
            &server,
            "1 pending pods the API server refuses to create again",
        )
    })
    .await;
    eventually("the pod told why", || {
        events(&server)
            .iter()
            .any(|e| e == "CannotRecreateForDefaultScheduler batch")
    })
    .await;
    let pod = server.get("pods", "locked", "batch").unwrap();
    assert!(pod["metadata"]["deletionTimestamp"].is_null());
    assert_eq!(pod["spec"]["schedulerName"], SCHEDULER, "left as it was");
    assert_eq!(operator.metrics.pods_not_recreatable.get(), 1);
    assert!(
        get(&server, "apps/deployments", SCHEDULER).is_some(),
        "its scheduler stays while it waits"
    );
    assert_eq!(
        requests_to(&server, "DELETE /api/v1/namespaces/locked/pods/batch"),
        0
    );
    let refusal = server
        .list("events.k8s.io/events")
        .into_iter()
        .find(|e| e["reason"] == "CannotRecreateForDefaultScheduler")
        .unwrap();
    assert!(
        refusal["note"]
            .as_str()
            .unwrap()
            .contains("namespace locked admits no new pods"),
        "{refusal}"
    );
    // Allowed again: released, and the uninstall ends.
    server.delete(
        "admissionregistration.k8s.io/validatingadmissionpolicybindings",
        "",
        "lock-down",
    );
    cppc_gone(&server).await;
    assert_eq!(
        server.get("pods", "locked", "batch").unwrap()["spec"]["schedulerName"],
        "default-scheduler"
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journaled_pod_that_cannot_be_created_does_not_stop_the_reconcile() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    // A re-creation a previous operator started: the pod deleted, its copy journaled.
    let copy = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan", "namespace": "gone"},
        "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c", "image": "i"}]}});
    server.inject(Fault::new(
        Some(Method::POST),
        "/api/v1/namespaces/gone/pods",
        Effect::Status(403),
    ));
    server.apply(
        "configmaps",
        json!({"metadata": {"name": "multiarch-recreate-u-1", "namespace": NS,
                            "labels": {"multiarch.openshift.io/recreated-pod": "true"}},
               "data": {"pod.json": copy.to_string()}}),
    );
    // The rest of the work goes on: a spec change is still installed.
    patch_spec(
        &server,
        json!({"plugins": {"execFormatErrorMonitor": {"enabled": true}}}),
    )
    .await;
    eventually("the monitor installed", || {
        get(&server, "apps/daemonsets", "multiarch-enoexec-daemon").is_some()
    })
    .await;
    eventually("Degraded naming the journal entry", || {
        condition(&server, "Degraded").is_some_and(|c| {
            c["status"] == "True"
                && c["message"]
                    .as_str()
                    .unwrap()
                    .contains("ConfigMap multiarch/multiarch-recreate-u-1")
        })
    })
    .await;
    assert_eq!(
        condition(&server, "Available").unwrap()["status"],
        "True",
        "routing stays on"
    );
    eventually("the event on the ClusterPodPlacementConfig", || {
        events(&server)
            .iter()
            .any(|e| e == "PodNotRecreated cluster")
    })
    .await;
    assert!(
        server
            .get("configmaps", NS, "multiarch-recreate-u-1")
            .is_some(),
        "the copy is kept for a person"
    );
    // Once it can be created, it is, and Degraded clears.
    server.clear_faults();
    eventually("the pod recreated", || {
        server.get("pods", "gone", "orphan").is_some()
    })
    .await;
    eventually("Degraded cleared", || {
        condition(&server, "Degraded").is_some_and(|c| c["status"] == "False")
    })
    .await;
    assert!(
        server
            .get("configmaps", NS, "multiarch-recreate-u-1")
            .is_none()
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_clock_starts_when_the_podplacementconfigs_are_gone() {
    let server = Arc::new(cluster().await);
    let drain = Duration::from_secs(4);
    let (_rollouts, operator) = installed(&server, json!({}), drain).await;
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "prefs", "namespace": "shop"}, "spec": {"priority": 1, "plugins": {}}}),
    );
    server.apply("pods", gated_pod("shop", "waiting"));
    delete_cppc(&server).await;
    eventually("the uninstall held by the PodPlacementConfig", || {
        deprovisioning_says(&server, "shop/prefs")
    })
    .await;
    // Held longer than the drain timeout.
    tokio::time::sleep(drain + Duration::from_secs(1)).await;
    server.delete(
        "multiarch.openshift.io/podplacementconfigs",
        "shop",
        "prefs",
    );
    // The gate controller still gets its time with the pod.
    eventually("the pod left to the gate controller", || {
        deprovisioning_says(
            &server,
            "1 gated pods to be processed by the gate controller",
        )
    })
    .await;
    cppc_gone(&server).await;
    let pod: Value = server.get("pods", "shop", "waiting").unwrap();
    assert!(
        pod["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_namespace_selector_degrades_and_stops_nothing_else() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    // Written past the CRD and the webhook (they were not there yet).
    let mut stored = get(
        &server,
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "cluster",
    )
    .unwrap();
    stored["spec"]["namespaceSelector"] =
        json!({"matchExpressions": [{"key": "team", "operator": "In"}]});
    stored["spec"]["plugins"] = json!({"execFormatErrorMonitor": {"enabled": true}});
    server.apply("multiarch.openshift.io/clusterpodplacementconfigs", stored);
    eventually("Degraded naming the selector", || {
        condition(&server, "Degraded").is_some_and(|c| {
            c["status"] == "True"
                && c["message"]
                    .as_str()
                    .unwrap()
                    .contains("matchExpressions[0].values: Required value")
        })
    })
    .await;
    assert!(
        get(&server, "apps/daemonsets", "multiarch-enoexec-daemon").is_some(),
        "the rest of the spec is installed"
    );
    let configuration = get(&server, MWC, "multiarch-webhook").unwrap();
    assert!(
        !configuration.to_string().contains("\"team\""),
        "the configuration keeps its previous selector"
    );
    assert_eq!(condition(&server, "Available").unwrap()["status"], "True");
    operator.stop().await;
}

fn finalizers(server: &FakeApiServer) -> Vec<String> {
    get(
        server,
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "cluster",
    )
    .map(|c| {
        c["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| f.as_str().unwrap().to_owned())
            .collect()
    })
    .unwrap_or_default()
}

const NO_PPC: &str = "finalizers.multiarch.openshift.io/no-pod-placement-config";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_no_pod_placement_config_finalizer_is_kept_while_any_exists_as_mto_keeps_it() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    assert!(!finalizers(&server).iter().any(|f| f == NO_PPC));
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "prefs", "namespace": "shop"}, "spec": {"priority": 1, "plugins": {}}}),
    );
    eventually("the finalizer added", || {
        finalizers(&server).iter().any(|f| f == NO_PPC)
    })
    .await;
    server.delete(
        "multiarch.openshift.io/podplacementconfigs",
        "shop",
        "prefs",
    );
    eventually("the finalizer removed", || {
        !finalizers(&server).iter().any(|f| f == NO_PPC)
    })
    .await;
    // During an uninstall it holds until the configs are gone, then goes first.
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "prefs", "namespace": "shop"}, "spec": {"priority": 1, "plugins": {}}}),
    );
    eventually("the finalizer added again", || {
        finalizers(&server).iter().any(|f| f == NO_PPC)
    })
    .await;
    delete_cppc(&server).await;
    eventually("the uninstall held", || {
        deprovisioning_says(&server, "shop/prefs")
    })
    .await;
    assert!(finalizers(&server).iter().any(|f| f == NO_PPC));
    server.delete(
        "multiarch.openshift.io/podplacementconfigs",
        "shop",
        "prefs",
    );
    cppc_gone(&server).await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uninstall_waits_for_journaled_pods_to_be_created_again() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    let copy = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "orphan", "namespace": "gone"},
        "spec": {"schedulerName": "default-scheduler", "containers": [{"name": "c", "image": "i"}]}});
    server.inject(Fault::new(
        Some(Method::POST),
        "/api/v1/namespaces/gone/pods",
        Effect::Status(403),
    ));
    server.apply(
        "configmaps",
        json!({"metadata": {"name": "multiarch-recreate-u-2", "namespace": NS,
                            "labels": {"multiarch.openshift.io/recreated-pod": "true"}},
               "data": {"pod.json": copy.to_string()}}),
    );
    delete_cppc(&server).await;
    eventually("the uninstall waiting for the journaled pod", || {
        deprovisioning_says(&server, "1 journaled pods to be created again")
    })
    .await;
    assert!(
        server
            .get("configmaps", NS, "multiarch-recreate-u-2")
            .is_some()
    );
    server.clear_faults();
    cppc_gone(&server).await;
    assert!(server.get("pods", "gone", "orphan").is_some(), "never lost");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_its_controller_recreates_is_probed_without_the_owner_the_operator_cannot_set() {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(600)).await;
    server.apply("pods", pending_pod("shop", "web-1", SCHEDULER, Some("web")));
    rollouts.hold(SCHEDULER);
    // As OwnerReferencesPermissionEnforcement refuses the operator an owner it may not
    // block: the operator never creates such a pod; its controller does.
    server.apply(
        "admissionregistration.k8s.io/validatingadmissionpolicies",
        json!({"metadata": {"name": "no-foreign-owners"}, "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "!has(object.metadata.ownerReferences)",
                             "message": "cannot set blockOwnerDeletion", "reason": "Forbidden"}]}}),
    );
    server.apply(
        "admissionregistration.k8s.io/validatingadmissionpolicybindings",
        json!({"metadata": {"name": "no-foreign-owners"}, "spec": {"policyName": "no-foreign-owners", "validationActions": ["Deny"]}}),
    );
    delete_cppc(&server).await;
    cppc_gone(&server).await;
    assert!(
        server.get("pods", "shop", "web-1").is_none(),
        "deleted for its ReplicaSet to recreate"
    );
    assert!(
        events(&server)
            .iter()
            .any(|e| e == "RecreatedForDefaultScheduler web-1")
    );
    operator.stop().await;
}
