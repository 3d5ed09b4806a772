//! The default plugin set end to end against the fake API server: pods with claims
//! (bound local volumes, WaitForFirstConsumer claims provisioned or bound), preemption
//! as kube-scheduler 1.36 does it (the recorded situation, word for word), namespace
//! selectors, and every request the scheduler makes granted by its generated RBAC.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::rbac;

mod common;

use common::{
    events_for, eventually, node, node_of, node_of_in, options, pod, ready, recorded,
    recorded_note, start, start_with_metrics,
};
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_scheduler::in_cluster::metrics::SchedulerMetrics;
use serde_json::{Value, json};

fn storage_class(name: &str, provisioner: &str) -> Value {
    json!({"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"})
}

fn local_volume(name: &str, class: &str, node: &str) -> Value {
    json!({"metadata": {"name": name},
           "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                    "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem", "local": {"path": "/mnt/disk"},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}},
           "status": {"phase": "Available"}})
}

fn claim(name: &str, class: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "shop"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": class, "volumeMode": "Filesystem"},
           "status": {"phase": "Pending"}})
}

fn with_claim(mut pod: Value, claim: &str) -> Value {
    pod["spec"]["volumes"] =
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]);
    pod
}

/// The PersistentVolume controller's part once a volume names its claim, or once a
/// provisioner created one: the claim is bound.
fn complete_binding(server: &FakeApiServer, claim_name: &str, volume: &str) {
    let mut pvc = server
        .get("persistentvolumeclaims", "shop", claim_name)
        .unwrap();
    pvc["spec"]["volumeName"] = json!(volume);
    pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"] = json!("yes");
    pvc["status"] = json!({"phase": "Bound"});
    server.apply("persistentvolumeclaims", pvc);
}

/// `own`: the requests the test itself made.
fn assert_rbac_grants_everything(server: &FakeApiServer, own: &[&str]) {
    let rules = rbac::rules(&[multiarch_operator::install::scheduler_rules()]);
    let requests: Vec<String> = server
        .requests()
        .into_iter()
        // The Lease is granted by its own Role (tested with the leader election).
        .filter(|r| !r.contains("/leases") && !own.contains(&r.as_str()))
        .collect();
    rbac::assert_granted(&rules, &requests);
}

/// A StatefulSet pod whose claim is bound to a local volume pinned to an arm64 node lands
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_pod_follows_its_local_volume() {
    let server = FakeApiServer::start().await;
    for (name, arch) in [("amd-1", "amd64"), ("arm-1", "arm64"), ("arm-2", "arm64")] {
        server.apply("nodes", node(name, arch, "4"));
    }
    server.apply(
        "storage.k8s.io/storageclasses",
        storage_class("local", "kubernetes.io/no-provisioner"),
    );
    let mut pv = local_volume("pv-arm-2", "local", "arm-2");
    pv["spec"]["claimRef"] =
        json!({"kind": "PersistentVolumeClaim", "namespace": "shop", "name": "data-db-0"});
    pv["status"]["phase"] = json!("Bound");
    server.apply("persistentvolumes", pv);
    server.apply("persistentvolumeclaims", claim("data-db-0", "local"));
    complete_binding(&server, "data-db-0", "pv-arm-2");
    let runtime = start(&server, "a", false);
    let mut db = with_claim(pod("db-0", "multi:1", "100m"), "data-db-0");
    db["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-1", "controller": true}]);
    server.apply("pods", db);
    eventually("db-0 bound", || node_of(&server, "db-0").is_some()).await;
    assert_eq!(node_of(&server, "db-0").as_deref(), Some("arm-2"));
    assert_rbac_grants_everything(&server, &[]);
    runtime.shutdown().await.unwrap();
}

/// A WaitForFirstConsumer claim is provisioned on a node whose architecture fits the
/// image: `selected-node` names it, and the pod is bound once the claim is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_first_consumer_claim_is_provisioned_where_the_image_runs() {
    let server = FakeApiServer::start().await;
    for (name, arch) in [("amd-1", "amd64"), ("amd-2", "amd64"), ("arm-1", "arm64")] {
        server.apply("nodes", node(name, arch, "4"));
    }
    server.apply(
        "storage.k8s.io/storageclasses",
        storage_class("fast", "csi.example.com"),
    );
    server.apply("persistentvolumeclaims", claim("data", "fast"));
    let runtime = start(&server, "a", false);
    server.apply("pods", with_claim(pod("app", "arm:1", "100m"), "data"));
    eventually("the claim's selected node", || {
        server
            .get("persistentvolumeclaims", "shop", "data")
            .unwrap()["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
            .is_string()
    })
    .await;
    let pvc = server
        .get("persistentvolumeclaims", "shop", "data")
        .unwrap();
    assert_eq!(
        pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"],
        "arm-1"
    );
    // Not bound before its claim is, and nominated there meanwhile (kube-scheduler's
    // NominatedNodeNameForExpectation), written before PreBind's first volume write.
    assert!(node_of(&server, "app").is_none());
    let pod_status =
        |server: &FakeApiServer| server.get("pods", "shop", "app").unwrap()["status"].clone();
    assert_eq!(pod_status(&server)["nominatedNodeName"], "arm-1");
    let requests = server.requests();
    let position = |what: &str| {
        requests
            .iter()
            .position(|r| r.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} in {requests:?}"))
    };
    assert!(
        position("PATCH /api/v1/namespaces/shop/pods/app/status")
            < position("PATCH /api/v1/namespaces/shop/persistentvolumeclaims/data"),
        "{requests:?}"
    );
    // The provisioner creates the volume; the PV controller binds the claim.
    let mut pv = local_volume("pvc-1", "fast", "arm-1");
    pv["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim", "namespace": "shop", "name": "data", "uid": pvc["metadata"]["uid"]});
    pv["status"]["phase"] = json!("Bound");
    server.apply("persistentvolumes", pv);
    complete_binding(&server, "data", "pvc-1");
    eventually("app bound", || node_of(&server, "app").is_some()).await;
    assert_eq!(node_of(&server, "app").as_deref(), Some("arm-1"));
    // The binding ended the nomination (the API server clears it, as 1.35+ does).
    assert!(pod_status(&server)["nominatedNodeName"].is_null());
    assert_rbac_grants_everything(&server, &[]);
    runtime.shutdown().await.unwrap();
}

/// A binding that fails after PreBind nominated the node takes the nomination back (as
/// kube-scheduler's failed binding cycle does): the pod is not going there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_binding_takes_back_the_nomination_prebind_made() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "4"));
    server.apply(
        "storage.k8s.io/storageclasses",
        storage_class("fast", "csi.example.com"),
    );
    server.apply("persistentvolumeclaims", claim("data", "fast"));
    // Every binding is refused: the pod is never bound in this test.
    server.fail_next_bindings(500, 10_000);
    let runtime = start(&server, "a", false);
    server.apply("pods", with_claim(pod("app", "arm:1", "100m"), "data"));
    let nominated =
        || server.get("pods", "shop", "app").unwrap()["status"]["nominatedNodeName"].clone();
    eventually("the nomination before PreBind", || nominated() == "arm-1").await;
    let pvc = server
        .get("persistentvolumeclaims", "shop", "data")
        .unwrap();
    let mut pv = local_volume("pvc-1", "fast", "arm-1");
    pv["spec"]["claimRef"] = json!({"kind": "PersistentVolumeClaim", "namespace": "shop", "name": "data", "uid": pvc["metadata"]["uid"]});
    pv["status"]["phase"] = json!("Bound");
    server.apply("persistentvolumes", pv);
    complete_binding(&server, "data", "pvc-1");
    eventually("the refused binding told on the pod", || {
        server.get("pods", "shop", "app").unwrap()["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulerError")
            })
    })
    .await;
    eventually("the nomination taken back", || nominated().is_null()).await;
    assert!(node_of(&server, "app").is_none());
    runtime.shutdown().await.unwrap();
}

/// An available local volume on a node that fits gets the claim's reference (written
/// on the version the decision was made on); the pod is bound once the claim is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_first_consumer_claim_gets_an_available_volume() {
    let server = FakeApiServer::start().await;
    for (name, arch) in [("amd-1", "amd64"), ("arm-1", "arm64")] {
        server.apply("nodes", node(name, arch, "4"));
    }
    server.apply(
        "storage.k8s.io/storageclasses",
        storage_class("local", "kubernetes.io/no-provisioner"),
    );
    server.apply(
        "persistentvolumes",
        local_volume("pv-amd", "local", "amd-1"),
    );
    server.apply(
        "persistentvolumes",
        local_volume("pv-arm", "local", "arm-1"),
    );
    server.apply("persistentvolumeclaims", claim("data", "local"));
    let runtime = start(&server, "a", false);
    // Only amd64 runs the image: the amd64 volume is the one.
    server.apply("pods", with_claim(pod("app", "amd:1", "100m"), "data"));
    eventually("the volume's claim reference", || {
        server.get("persistentvolumes", "", "pv-amd").unwrap()["spec"]["claimRef"]["name"] == "data"
    })
    .await;
    let pv = server.get("persistentvolumes", "", "pv-amd").unwrap();
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );
    assert!(server.get("persistentvolumes", "", "pv-arm").unwrap()["spec"]["claimRef"].is_null());
    complete_binding(&server, "data", "pv-amd");
    eventually("app bound", || node_of(&server, "app").is_some()).await;
    assert_eq!(node_of(&server, "app").as_deref(), Some("amd-1"));
    runtime.shutdown().await.unwrap();
}

/// The cluster of the recorded preemption: four nodes, two priority classes, a budget
/// protecting `pdb: yes` pods, and the low pods running where kube-scheduler put them.
fn recorded_preemption_cluster(server: &FakeApiServer) {
    for (name, arch) in [
        ("rec-amd64-0", "amd64"),
        ("rec-amd64-1", "amd64"),
        ("rec-ppc64le-0", "ppc64le"),
        ("rec-ppc64le-1", "ppc64le"),
    ] {
        server.apply("nodes", node(name, arch, "4"));
    }
    server.apply("namespaces", json!({"metadata": {"name": "preempt"}}));
    server.apply(
        "scheduling.k8s.io/priorityclasses",
        json!({"metadata": {"name": "low"}, "value": 10}),
    );
    server.apply(
        "scheduling.k8s.io/priorityclasses",
        json!({"metadata": {"name": "high"}, "value": 100000}),
    );
    server.apply("policy/poddisruptionbudgets", json!({
        "metadata": {"name": "protect", "namespace": "preempt"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"pdb": "yes"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1, "observedGeneration": 1}}));
    // The recorded low pods, already running where kube-scheduler put them.
    for low in recorded("preemption-pods.json")["items"]
        .as_array()
        .unwrap()
    {
        if low["metadata"]["name"] == "low0" {
            let mut low = low.clone();
            low["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("managedFields");
            low["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            server.apply("pods", low);
        }
    }
    server.apply("pods", json!({
        "metadata": {"name": "low1", "namespace": "preempt"},
        "spec": {"nodeName": "rec-ppc64le-1", "priority": 10, "priorityClassName": "low", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c0", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "3800m", "memory": "500Mi"}}}]},
        "status": {"phase": "Running"}}));
}

/// The recorded preemption, on the fake API server: the unprotected victim gets the
/// DisruptionTarget condition, is deleted and gets `Preempted`; the preemptor's
/// `FailedScheduling` equals kube-scheduler's, it is nominated, then bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_pod_preempts_as_kube_scheduler_does() {
    let server = FakeApiServer::start().await;
    recorded_preemption_cluster(&server);
    let runtime = start(&server, "a", false);
    ready(&runtime).await;
    let client = common::client(&server);
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "preempt");
    let high: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "high", "namespace": "preempt"},
        "spec": {"schedulerName": "multiarch-scheduler", "priorityClassName": "high", "nodeSelector": {"kubernetes.io/arch": "ppc64le"},
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c0", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "1", "memory": "500Mi"}}}]}}))
    .unwrap();
    // Created through the API: Priority admission fills the priority from its class.
    let created = pods.create(&Default::default(), &high).await.unwrap();
    assert_eq!(created.spec.as_ref().unwrap().priority, Some(100_000));
    let high_uid = created.metadata.uid.clone().unwrap();

    eventually("high bound", || {
        node_of_in(&server, "preempt", "high").is_some()
    })
    .await;
    assert_eq!(
        node_of_in(&server, "preempt", "high").as_deref(),
        Some("rec-ppc64le-1")
    );
    assert!(
        server.get("pods", "preempt", "low1").is_none(),
        "the victim is gone"
    );
    assert!(
        server.get("pods", "preempt", "low0").is_some(),
        "the protected pod stays"
    );

    // Events are written by their own task: the binding may be seen first.
    let has_event = |pod: &str, reason: &str| {
        events_for(&server, pod)
            .iter()
            .any(|e| e["reason"] == reason)
    };
    eventually("high's FailedScheduling event", || {
        has_event("high", "FailedScheduling")
    })
    .await;
    eventually("low1's Preempted event", || has_event("low1", "Preempted")).await;
    let failed: Vec<Value> = events_for(&server, "high")
        .into_iter()
        .filter(|e| e["reason"] == "FailedScheduling")
        .collect();
    assert_eq!(
        failed[0]["note"],
        recorded_note("preemption-events.json", "FailedScheduling", "high")
    );
    let preempted: Vec<Value> = events_for(&server, "low1")
        .into_iter()
        .filter(|e| e["reason"] == "Preempted")
        .collect();
    assert_eq!(preempted.len(), 1);
    assert_eq!(preempted[0]["type"], "Normal");
    assert_eq!(preempted[0]["action"], "Preempting");
    assert_eq!(
        preempted[0]["note"],
        format!("Preempted by pod {high_uid} on node rec-ppc64le-1")
    );
    let requests = server.requests();
    let position = |wanted: &str| requests.iter().position(|r| r == wanted);
    let condition = position("PATCH /api/v1/namespaces/preempt/pods/low1/status").unwrap();
    let delete = position("DELETE /api/v1/namespaces/preempt/pods/low1").unwrap();
    let nominated = position("PATCH /api/v1/namespaces/preempt/pods/high/status").unwrap();
    assert!(condition < delete, "DisruptionTarget before the deletion");
    assert!(nominated < position("POST /api/v1/namespaces/preempt/pods/high/binding").unwrap());
    assert_rbac_grants_everything(&server, &["POST /api/v1/namespaces/preempt/pods"]);
    runtime.shutdown().await.unwrap();
}

/// A victim with a grace period terminates first: the preemptor waits for it without
/// evicting anyone else, and is bound once the kubelet confirms the victim is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preemptor_waits_for_a_terminating_victim() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "4"));
    for (name, priority) in [("low", 1), ("lower", 0)] {
        let mut victim = pod(name, "multi:1", "2");
        victim["spec"]["nodeName"] = json!("arm-1");
        victim["spec"]["priority"] = json!(priority);
        victim["spec"]["schedulerName"] = json!("default-scheduler");
        server.apply("pods", victim);
    }
    let runtime = start(&server, "a", false);
    let mut high = pod("high", "multi:1", "2");
    high["spec"]["priority"] = json!(1000);
    server.apply("pods", high);
    eventually("a victim terminating", || {
        server
            .get("pods", "shop", "lower")
            .is_some_and(|p| !p["metadata"]["deletionTimestamp"].is_null())
    })
    .await;
    assert_eq!(
        server.get("pods", "shop", "high").unwrap()["status"]["nominatedNodeName"],
        "arm-1"
    );
    // While it terminates, nobody else is evicted.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(server.get("pods", "shop", "low").unwrap()["metadata"]["deletionTimestamp"].is_null());
    assert!(node_of(&server, "high").is_none());
    assert!(server.finish_termination("shop", "lower"));
    eventually("high bound", || node_of(&server, "high").is_some()).await;
    assert_eq!(node_of(&server, "high").as_deref(), Some("arm-1"));
    runtime.shutdown().await.unwrap();
}

/// The recorded cross-namespace situation: the term's namespaceSelector is evaluated
/// against the namespaces' labels and the message is kube-scheduler's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_namespace_anti_affinity_term_keeps_pods_apart() {
    let server = FakeApiServer::start().await;
    for (name, arch) in [
        ("rec-amd64-0", "amd64"),
        ("rec-amd64-1", "amd64"),
        ("rec-ppc64le-0", "ppc64le"),
        ("rec-ppc64le-1", "ppc64le"),
    ] {
        server.apply("nodes", node(name, arch, "4"));
    }
    server.apply(
        "namespaces",
        json!({"metadata": {"name": "team-a", "labels": {"team": "x"}}}),
    );
    server.apply("namespaces", json!({"metadata": {"name": "team-b"}}));
    let mut solo = pod("solo", "multi:1", "100m");
    solo["metadata"]["namespace"] = json!("team-a");
    solo["metadata"]["labels"] = json!({"app": "solo"});
    solo["spec"]["nodeName"] = json!("rec-amd64-0");
    server.apply("pods", solo);
    let runtime = start(&server, "a", false);
    let mut y = recorded("cross-namespace-anti-affinity-pod.json");
    y["metadata"] = json!({"name": "y", "namespace": "team-b"});
    y["spec"]["schedulerName"] = json!("multiarch-scheduler");
    y.as_object_mut().unwrap().remove("status");
    server.apply("pods", y);
    eventually("y reported", || !events_for(&server, "y").is_empty()).await;
    assert_eq!(
        events_for(&server, "y")[0]["note"],
        recorded_note(
            "cross-namespace-anti-affinity-events.json",
            "FailedScheduling",
            "y"
        )
    );
    // The other team's namespace loses the label: the pod may go there now.
    server.apply(
        "namespaces",
        json!({"metadata": {"name": "team-a", "labels": {"team": "z"}}}),
    );
    eventually("y bound", || node_of_in(&server, "team-b", "y").is_some()).await;
    assert_eq!(
        node_of_in(&server, "team-b", "y").as_deref(),
        Some("rec-amd64-0")
    );
    runtime.shutdown().await.unwrap();
}

/// Node heartbeats change nothing the plugins read: they move no waiting pod, and the
/// hint counter says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_do_not_requeue_and_hints_are_counted() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "4"));
    let metrics = SchedulerMetrics::default();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let runtime = start_with_metrics(&server, options("a", false), metrics);
    server.apply("pods", pod("big", "arm:1", "8"));
    eventually("big reported", || !events_for(&server, "big").is_empty()).await;
    let attempts = || {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    };
    for beat in 0..5 {
        let mut heartbeat = node("arm-1", "arm64", "4");
        heartbeat["status"]["conditions"][0]["lastHeartbeatTime"] =
            json!(format!("2026-11-23T00:00:0{beat}Z"));
        server.apply("nodes", heartbeat);
    }
    // A node big enough comes: that one helps.
    server.apply("nodes", node("arm-2", "arm64", "16"));
    eventually("big bound", || node_of(&server, "big").is_some()).await;
    eventually("the hint counters exported", || {
        attempts().contains(
            "multiarch_scheduler_queueing_hints_total{event=\"NodeUpdate\",hint=\"QueueSkip\"} 5",
        )
    })
    .await;
    let text = attempts();
    assert!(
        text.contains(
            "multiarch_scheduler_queueing_hints_total{event=\"NodeAdd\",hint=\"Queue\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("multiarch_scheduler_schedule_attempts_total{result=\"unschedulable\"} 1\n"),
        "one failed attempt only: heartbeats retried nothing\n{text}"
    );
    runtime.shutdown().await.unwrap();
}
