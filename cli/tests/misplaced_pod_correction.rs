//! The misplaced-pod correction (`misplacedPodCorrection`) against the fake API server:
//! a ReplicaSet's pod on a node its image has no build for (or only builds of a higher
//! x86-64 level) is evicted once, through the Eviction API, and its replacement bound by
//! the multiarch scheduler to a compatible node; a PodDisruptionBudget that allows no
//! disruption blocks it until it does; bare, DaemonSet and unrouted pods are only
//! reported; a dry run writes nothing but events; and the limits hold with 1,000
//! misplaced pods.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::rbac;
use multiarch_test_support::scheduler;
use multiarch_test_support::table_inspector;

use std::time::{Duration, Instant};

use multiarch_enoexec::handler::{HandlerOptions, metrics::HandlerMetrics, start};
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_runtime::supervisor::Supervisor;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// As the handler's eviction client: no retries of 429.
fn evictions(server: &FakeApiServer) -> kube::Client {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

fn node(server: &FakeApiServer, name: &str, arch: &str) {
    server.apply(
        "nodes",
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux", "kubernetes.io/hostname": name}},
               "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                          "conditions": [{"type": "Ready", "status": "True"}]}}),
    );
}

/// An amd64 node whose daemon labelled its x86-64 level.
fn node_at_level(server: &FakeApiServer, name: &str, level: &str) {
    node(server, name, "amd64");
    let mut node = server.get("nodes", "", name).unwrap();
    node["metadata"]["labels"]["multiarch.openshift.io/arch-variant"] = json!(level);
    server.apply("nodes", node);
}

fn correction(server: &FakeApiServer, settings: Value, selector: Option<Value>) {
    let mut spec = json!({"plugins": {"misplacedPodCorrection": settings}});
    if let Some(selector) = selector {
        spec["namespaceSelector"] = selector;
    }
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
               "metadata": {"name": "cluster"}, "spec": spec}),
    );
}

/// A running pod on `node`; `owner` is (kind, name) of its controller.
fn running(
    namespace: &str,
    name: &str,
    image: &str,
    node: &str,
    owner: Option<(&str, &str)>,
) -> Value {
    let mut pod = json!({"metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}"), "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": image}]},
        "status": {"phase": "Running"}});
    if let Some((kind, owner)) = owner {
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind, "name": owner,
            "uid": format!("uid-{owner}"), "controller": true}]);
    }
    pod
}

fn handler(server: &FakeApiServer, metrics: &HandlerMetrics, max_pods: usize) -> Supervisor {
    handler_scanning(server, metrics, max_pods, Duration::from_millis(100))
}

fn handler_scanning(
    server: &FakeApiServer,
    metrics: &HandlerMetrics,
    max_pods: usize,
    interval: Duration,
) -> Supervisor {
    handler_with(server, metrics, options(max_pods, interval))
}

/// The handler's options in these tests: no election, scans as given.
fn options(max_pods: usize, interval: Duration) -> HandlerOptions {
    HandlerOptions {
        namespace: "multiarch".into(),
        identity: "test".into(),
        incomplete_grace: Duration::from_secs(1),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        election: None,
        correction_scan_interval: interval,
        correction_scan_max_pods: max_pods,
    }
}

/// A handler with the table inspector; its tasks run while the supervisor is kept.
fn handler_with(
    server: &FakeApiServer,
    metrics: &HandlerMetrics,
    options: HandlerOptions,
) -> Supervisor {
    let supervisor = Supervisor::new(CancellationToken::new());
    start(
        client(server),
        evictions(server),
        Some(table_inspector::standard()),
        options,
        metrics.clone(),
        &supervisor.tasks(),
    );
    supervisor
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn gone_or_going(server: &FakeApiServer, namespace: &str, name: &str) -> bool {
    server
        .get("pods", namespace, name)
        .is_none_or(|p| !p["metadata"]["deletionTimestamp"].is_null())
}

/// `(reason, note)` of the events about `name` (a pod or a controller).
fn events(server: &FakeApiServer, name: &str) -> Vec<(String, String)> {
    server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_owned(),
                e["note"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn evictions_posted(server: &FakeApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.starts_with("POST ") && r.ends_with("/eviction"))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misplaced_replica_set_pod_is_evicted_once_and_its_replacement_placed_where_it_runs() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    correction(&server, json!({"enabled": true}), None);
    // An amd64-only image on the arm64 node: it crash-loops with exec format error.
    server.apply(
        "pods",
        running(
            "shop",
            "web-1",
            "amd:1",
            "arm-1",
            Some(("ReplicaSet", "web-rs")),
        ),
    );
    // Its neighbour runs where its image has a build: never touched.
    server.apply(
        "pods",
        running(
            "shop",
            "web-ok",
            "multi:1",
            "arm-1",
            Some(("ReplicaSet", "ok-rs")),
        ),
    );
    let metrics = HandlerMetrics::default();
    let _handler = handler(&server, &metrics, 100);
    // The events are published once the Eviction API has answered: the last step.
    let evicted_event = |server: &FakeApiServer, name: &str| {
        events(server, name)
            .iter()
            .any(|(r, _)| r == "MisplacedPodEvicted")
    };
    eventually("web-1 evicted", || {
        evicted_event(&server, "web-1") && evicted_event(&server, "web-rs")
    })
    .await;
    assert!(gone_or_going(&server, "shop", "web-1"));
    let evicted = events(&server, "web-1");
    assert!(
        evicted.iter().any(|(r, n)| r == "MisplacedPodEvicted"
            && n.contains("its node is arm64, and amd:1 has no linux/arm64 build")
            && n.contains("ReplicaSet web-rs recreates it")),
        "{evicted:?}"
    );
    assert!(
        events(&server, "web-rs")
            .iter()
            .any(|(r, _)| r == "MisplacedPodEvicted"),
        "the controller is told too"
    );
    // Later scans find it going: it is evicted once.
    let scans = metrics.correction.found.get();
    let pod_lists = |server: &FakeApiServer| {
        server
            .requests()
            .iter()
            .filter(|r| *r == "GET /api/v1/pods (metadata)")
            .count()
    };
    let before = pod_lists(&server);
    eventually("three more scans", || pod_lists(&server) >= before + 3).await;
    assert_eq!(evictions_posted(&server), 1);
    assert_eq!(metrics.correction.evicted.get(), 1);
    assert_eq!(scans, 1, "one misplaced pod found");
    assert!(
        server.get("pods", "shop", "web-ok").unwrap()["metadata"]["deletionTimestamp"].is_null()
    );

    // The ReplicaSet's replacement, routed by the webhook, lands on the amd64 node.
    let mut replacement = json!({"metadata": {"name": "web-2", "namespace": "shop", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "uid-web-rs", "controller": true}]},
        "spec": {"schedulerName": "multiarch-scheduler", "containers": [{"name": "app", "image": "amd:1"}]},
        "status": {"phase": "Pending"}});
    replacement["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "100m"}});
    server.apply("pods", replacement);
    let (running, _supervisor) = scheduler::start(client(&server), table_inspector::standard());
    eventually("the replacement bound", || {
        server.get("pods", "shop", "web-2").unwrap()["spec"]["nodeName"] == "amd-1"
    })
    .await;
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_on_a_node_below_its_image_s_x86_64_level_is_moved_to_a_node_at_that_level() {
    let server = FakeApiServer::start().await;
    node_at_level(&server, "amd-2", "v2");
    node_at_level(&server, "amd-4", "v4");
    correction(&server, json!({"enabled": true}), None);
    // ubi10:1 is built for x86-64-v3: on the v2 node its loader refuses the CPU (no exec
    // format error; the scan finds it).
    server.apply(
        "pods",
        running(
            "shop",
            "web-1",
            "ubi10:1",
            "amd-2",
            Some(("ReplicaSet", "web-rs")),
        ),
    );
    // A baseline build runs on any level: never touched.
    server.apply(
        "pods",
        running(
            "shop",
            "web-ok",
            "multi:1",
            "amd-2",
            Some(("ReplicaSet", "ok-rs")),
        ),
    );
    let metrics = HandlerMetrics::default();
    let _handler = handler(&server, &metrics, 100);
    eventually("web-1 evicted", || {
        events(&server, "web-1")
            .iter()
            .any(|(r, _)| r == "MisplacedPodEvicted")
    })
    .await;
    let evicted = events(&server, "web-1");
    assert!(
        evicted.iter().any(|(r, n)| r == "MisplacedPodEvicted"
            && n.contains("its node is amd64/v2, and ubi10:1 needs x86-64-v3")),
        "{evicted:?}"
    );
    assert_eq!(evictions_posted(&server), 1);
    assert!(
        server.get("pods", "shop", "web-ok").unwrap()["metadata"]["deletionTimestamp"].is_null()
    );

    // The replacement, routed to the multiarch scheduler, lands on the v4 node.
    server.apply(
        "pods",
        json!({"metadata": {"name": "web-2", "namespace": "shop", "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "uid-web-rs", "controller": true}]},
            "spec": {"schedulerName": "multiarch-scheduler", "containers": [{"name": "app", "image": "ubi10:1"}]},
            "status": {"phase": "Pending"}}),
    );
    let (running, _supervisor) = scheduler::start(client(&server), table_inspector::standard());
    eventually("the replacement bound", || {
        server.get("pods", "shop", "web-2").unwrap()["spec"]["nodeName"] == "amd-4"
    })
    .await;
    running.shutdown().await.unwrap();
}

/// `binaryInspection.unknownNodeLevel: Baseline`: an amd64 node whose level nothing says
/// runs x86-64-v1 only, so a v3 image's pod there is misplaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_unknown_level_taken_as_the_baseline_is_below_a_v3_image() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-silent", "amd64");
    node_at_level(&server, "amd-4", "v4");
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
               "metadata": {"name": "cluster"}, "spec": {"plugins": {
                   "misplacedPodCorrection": {"enabled": true},
                   "binaryInspection": {"enabled": true, "unknownNodeLevel": "Baseline"}}}}),
    );
    server.apply(
        "pods",
        running(
            "shop",
            "web-1",
            "ubi10:1",
            "amd-silent",
            Some(("ReplicaSet", "web-rs")),
        ),
    );
    let metrics = HandlerMetrics::default();
    let _handler = handler(&server, &metrics, 100);
    eventually("web-1 evicted", || {
        events(&server, "web-1")
            .iter()
            .any(|(r, _)| r == "MisplacedPodEvicted")
    })
    .await;
    let evicted = events(&server, "web-1");
    assert!(
        evicted.iter().any(|(r, n)| r == "MisplacedPodEvicted"
            && n.contains("its node is amd64/v1, and ubi10:1 needs x86-64-v3")),
        "{evicted:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_budget_blocks_the_eviction_until_it_allows_one() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    correction(&server, json!({"enabled": true}), None);
    server.apply(
        "policy/poddisruptionbudgets",
        json!({"metadata": {"name": "web", "namespace": "shop"},
               "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}},
               "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}),
    );
    server.apply(
        "pods",
        running(
            "shop",
            "web-1",
            "amd:1",
            "arm-1",
            Some(("ReplicaSet", "web-rs")),
        ),
    );
    let metrics = HandlerMetrics::default();
    let _handler = handler(&server, &metrics, 100);
    eventually("refused twice (retried)", || {
        metrics.correction.refused.get() >= 2
    })
    .await;
    assert!(
        server.get("pods", "shop", "web-1").unwrap()["metadata"]["deletionTimestamp"].is_null()
    );
    let refused = events(&server, "web-1");
    assert!(
        refused.iter().any(|(r, n)| r == "MisplacedPodNotCorrected"
            && n.contains("a PodDisruptionBudget allows no disruption now")
            && n.contains("The disruption budget web needs 1 healthy pods and has 1 currently")),
        "{refused:?}"
    );
    // The budget allows one: the next scan evicts it.
    let mut budget = server
        .get("policy/poddisruptionbudgets", "shop", "web")
        .unwrap();
    budget["status"]["disruptionsAllowed"] = json!(1);
    server.apply("policy/poddisruptionbudgets", budget);
    eventually("evicted", || metrics.correction.evicted.get() == 1).await;
    assert!(gone_or_going(&server, "shop", "web-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_daemon_set_and_unrouted_pods_are_only_reported_and_a_dry_run_only_tells() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    server.apply(
        "namespaces",
        json!({"metadata": {"name": "shop", "labels": {"multiarch": "on"}}}),
    );
    server.apply("namespaces", json!({"metadata": {"name": "legacy"}}));
    correction(
        &server,
        json!({"enabled": true, "dryRun": true}),
        Some(json!({"matchLabels": {"multiarch": "on"}})),
    );
    server.apply("pods", running("shop", "bare", "amd:1", "arm-1", None));
    server.apply(
        "pods",
        running(
            "shop",
            "agent",
            "amd:1",
            "arm-1",
            Some(("DaemonSet", "agent")),
        ),
    );
    server.apply(
        "pods",
        running(
            "legacy",
            "old",
            "amd:1",
            "arm-1",
            Some(("ReplicaSet", "old-rs")),
        ),
    );
    server.apply(
        "pods",
        running(
            "shop",
            "web-1",
            "amd:1",
            "arm-1",
            Some(("ReplicaSet", "web-rs")),
        ),
    );
    let metrics = HandlerMetrics::default();
    let _handler = handler(&server, &metrics, 100);
    let note = |pod: &str| {
        events(&server, pod)
            .into_iter()
            .find(|(r, _)| r == "MisplacedPodNotCorrected")
            .map(|(_, n)| n)
            .unwrap_or_default()
    };
    // The events are the last step of each judgement.
    eventually("every pod judged", || {
        ["bare", "agent", "old", "web-1"]
            .iter()
            .all(|pod| !note(pod).is_empty())
    })
    .await;
    assert!(
        note("bare").contains("no controller to recreate it"),
        "{}",
        note("bare")
    );
    assert!(
        note("agent").contains("DaemonSet's pod"),
        "{}",
        note("agent")
    );
    assert!(
        note("old").contains("namespaceSelector does not select namespace legacy"),
        "{}",
        note("old")
    );
    assert!(note("web-1").contains("dry run"), "{}", note("web-1"));
    // A dry run writes nothing but events: no eviction, no label, no other write.
    assert_eq!(evictions_posted(&server), 0);
    let writes: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET ") && !r.contains("/events"))
        .collect();
    assert_eq!(writes, Vec::<String>::new());

    // Out of dry run: the routed ReplicaSet's pod goes; the others are only labelled.
    correction(
        &server,
        json!({"enabled": true}),
        Some(json!({"matchLabels": {"multiarch": "on"}})),
    );
    eventually("web-1 evicted", || metrics.correction.evicted.get() == 1).await;
    assert!(gone_or_going(&server, "shop", "web-1"));
    for (namespace, pod) in [("shop", "bare"), ("shop", "agent"), ("legacy", "old")] {
        let kept = server.get("pods", namespace, pod).unwrap();
        assert!(kept["metadata"]["deletionTimestamp"].is_null(), "{pod}");
        eventually("labelled", || {
            server.get("pods", namespace, pod).unwrap()["metadata"]["labels"]["multiarch.openshift.io/misplaced"] == "true"
        })
        .await;
    }
    assert_eq!(evictions_posted(&server), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_hold_with_a_thousand_misplaced_pods() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    correction(
        &server,
        json!({"enabled": true, "maxEvictionsPerMinute": 10, "maxEvictionsPerControllerPerMinute": 1}),
        None,
    );
    // 1,000 misplaced pods of 100 ReplicaSets.
    for i in 0..1000 {
        server.apply(
            "pods",
            running(
                "shop",
                &format!("p-{i}"),
                "amd:1",
                "arm-1",
                Some(("ReplicaSet", &format!("rs-{}", i % 100))),
            ),
        );
    }
    let started = Instant::now();
    let metrics = HandlerMetrics::default();
    // One scan (the next is an hour away): every pod ends evicted or held by a limit.
    let _handler = handler_scanning(&server, &metrics, 2000, Duration::from_secs(3600));
    eventually("a thousand judged", || {
        metrics.correction.evicted.get() + metrics.correction.not_corrected("rate_limited") >= 1000
    })
    .await;
    let minutes = 1 + started.elapsed().as_secs() / 60;
    let evicted = usize::try_from(metrics.correction.evicted.get()).unwrap();
    assert_eq!(evicted, evictions_posted(&server));
    // At least the first minute's ten, and never more than ten in any minute.
    assert!(evicted >= 10, "{evicted}");
    assert!(
        evicted <= 10 * usize::try_from(minutes).unwrap(),
        "{evicted} in {minutes} minute(s)"
    );
    // Each ReplicaSet lost at most one pod a minute.
    let mut per_controller = std::collections::BTreeMap::<String, usize>::new();
    for pod in server.list("pods") {
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            *per_controller
                .entry(
                    pod["metadata"]["ownerReferences"][0]["name"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                )
                .or_default() += 1;
        }
    }
    assert!(
        per_controller
            .values()
            .all(|n| *n <= usize::try_from(minutes).unwrap()),
        "{per_controller:?}"
    );
    assert!(metrics.correction.not_corrected("rate_limited") > 0);
}

/// The ReplicaSet pod `web-1`, running `image` on `node` in container `cid`, reported by
/// its node (an ENoExecEvent whose status adds `report`) after the handler's first scan
/// (the next is an hour away): waits for its eviction, the report's last step. The
/// handler's metrics, and its supervisor (the handler runs while it is kept).
async fn evicted_from_a_report(
    server: &FakeApiServer,
    image: &str,
    node: &str,
    cid: &str,
    report: Value,
) -> (HandlerMetrics, Supervisor) {
    correction(server, json!({"enabled": true}), None);
    let metrics = HandlerMetrics::default();
    let handler = handler_scanning(server, &metrics, 100, Duration::from_secs(3600));
    eventually("the first scan", || {
        server
            .requests()
            .iter()
            .any(|r| r == "GET /api/v1/pods (metadata)")
    })
    .await;
    let mut pod = running("shop", "web-1", image, node, Some(("ReplicaSet", "web-rs")));
    pod["status"]["containerStatuses"] = json!([{"name": "app", "image": image, "containerID": cid,
        "imageID": "", "ready": false, "restartCount": 2}]);
    server.apply("pods", pod);
    let mut status =
        json!({"nodeName": node, "podName": "web-1", "podNamespace": "shop", "containerID": cid});
    if let (Some(status), Some(report)) = (status.as_object_mut(), report.as_object()) {
        status.extend(report.clone());
    }
    server.apply(
        "multiarch.openshift.io/enoexecevents",
        json!({"metadata": {"name": "e1", "namespace": "multiarch"}, "spec": {}, "status": status}),
    );
    eventually("evicted from the report", || {
        events(server, "web-1")
            .iter()
            .any(|(r, _)| r == "MisplacedPodEvicted")
    })
    .await;
    assert_eq!(metrics.correction.evicted.get(), 1);
    (metrics, handler)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_format_error_report_moves_the_pod_without_waiting_for_a_scan() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    let cid = format!("containerd://{}", "1".repeat(64));
    let _handler = evicted_from_a_report(&server, "amd:1", "arm-1", &cid, json!({})).await;
    assert!(gone_or_going(&server, "shop", "web-1"));
    assert!(
        events(&server, "web-1")
            .iter()
            .any(|(r, _)| r == "ExecFormatError")
    );
}

/// A loader's refusal reported by the node (the daemon read it from the container's log)
/// moves a pod whose image needs a level above its node's, without waiting for a scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loader_refusal_report_moves_the_pod_without_waiting_for_a_scan() {
    let server = FakeApiServer::start().await;
    node_at_level(&server, "amd-2", "v2");
    node_at_level(&server, "amd-4", "v4");
    let cid = format!("containerd://{}", "2".repeat(64));
    let report = json!({"loaderError": "Fatal glibc error: CPU does not support x86-64-v3"});
    let _handler = evicted_from_a_report(&server, "ubi10:1", "amd-2", &cid, report).await;
    let seen = events(&server, "web-1");
    assert!(
        seen.iter().any(|(r, n)| r == "CPULevelTooLow"
            && n.ends_with("the node is x86-64-v2, the image needs x86-64-v3")),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_take_turns_over_more_pods_than_one_looks_at_and_see_pods_that_cannot_pull() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    correction(&server, json!({"enabled": true, "dryRun": true}), None);
    for i in 0..5 {
        server.apply(
            "pods",
            running(
                "shop",
                &format!("p-{i}"),
                "amd:1",
                "arm-1",
                Some(("ReplicaSet", "rs")),
            ),
        );
    }
    // On its node but Pending: an image without a build for it cannot even be pulled.
    let mut pulling = running(
        "shop",
        "pulling",
        "amd:1",
        "arm-1",
        Some(("ReplicaSet", "rs")),
    );
    pulling["status"]["phase"] = json!("Pending");
    server.apply("pods", pulling);
    let metrics = HandlerMetrics::default();
    // Two pods a scan.
    let _handler = handler(&server, &metrics, 2);
    eventually("every pod judged in turn", || {
        (0..5)
            .map(|i| format!("p-{i}"))
            .chain(["pulling".to_owned()])
            .all(|pod| {
                events(&server, &pod)
                    .iter()
                    .any(|(r, n)| r == "MisplacedPodNotCorrected" && n.contains("dry run"))
            })
    })
    .await;
    assert_eq!(evictions_posted(&server), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_replica_neither_scans_nor_evicts() {
    use multiarch_runtime::leader_election::ElectionConfig;
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    correction(&server, json!({"enabled": true}), None);
    server.apply(
        "pods",
        running(
            "shop",
            "web-1",
            "amd:1",
            "arm-1",
            Some(("ReplicaSet", "web-rs")),
        ),
    );
    // Another replica leads, for longer than the test lasts.
    server.apply(
        "coordination.k8s.io/leases",
        json!({"metadata": {"name": "multiarch-enoexec-handler", "namespace": "multiarch"},
               "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 3600,
                        "acquireTime": "2026-11-22T00:00:00.000000Z", "renewTime": "2026-11-22T00:00:00.000000Z",
                        "leaseTransitions": 0}}),
    );
    let _handler = handler_with(
        &server,
        &HandlerMetrics::default(),
        HandlerOptions {
            identity: "replica-b".into(),
            election: Some(ElectionConfig {
                namespace: "multiarch".into(),
                lease_name: "multiarch-enoexec-handler".into(),
                identity: "replica-b".into(),
                lease_duration: Duration::from_secs(3600),
                renew_deadline: Duration::from_secs(1800),
                retry_period: Duration::from_millis(50),
            }),
            ..options(100, Duration::from_millis(50))
        },
    );
    // It has looked at the lease several times: it is a standby, not starting.
    let lease_reads = |server: &FakeApiServer| {
        server
            .requests()
            .iter()
            .filter(|r| r.contains("/leases/multiarch-enoexec-handler"))
            .count()
    };
    eventually("five looks at the lease", || lease_reads(&server) >= 5).await;
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r == "GET /api/v1/pods (metadata)"),
        "a standby scanned"
    );
    assert_eq!(evictions_posted(&server), 0);
    assert!(
        server.get("pods", "shop", "web-1").unwrap()["metadata"]["deletionTimestamp"].is_null()
    );
}

/// The image ID a node reports for `image` pulled at the digest of `digest` repeated, and
/// the reference of that digest.
fn running_digest(image: &str, digest: char) -> (String, String) {
    let digest = format!("sha256:{}", String::from(digest).repeat(64));
    let id = format!(
        "docker.io/library/{}@{digest}",
        image.split(':').next().unwrap()
    );
    let reference = multiarch_inspector::ImageRef::parse(image)
        .unwrap()
        .with_digest(&digest)
        .to_string();
    (id, reference)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_digest_a_pod_runs_is_judged_and_a_scan_never_reads_the_cluster_whole() {
    let server = FakeApiServer::start().await;
    node(&server, "amd-1", "amd64");
    node(&server, "arm-1", "arm64");
    correction(&server, json!({"enabled": true, "dryRun": true}), None);
    // `multi:1` now names an index of both; the arm64 node runs the amd64-only image the
    // tag named when the pod started.
    let (stale_id, stale) = running_digest("multi:1", 'a');
    let (fine_id, fine) = running_digest("amd:1", 'b');
    let inspector = std::sync::Arc::new(table_inspector::TableInspector(
        [
            ("multi:1".to_owned(), vec!["amd64", "arm64"]),
            ("amd:1".to_owned(), vec!["amd64"]),
            (stale, vec!["amd64"]),
            (fine, vec!["amd64"]),
        ]
        .into(),
    ));
    let with_status = |mut pod: Value, image_id: &str| {
        pod["status"]["containerStatuses"] = json!([{"name": "app", "image": "x", "imageID": image_id,
            "ready": true, "restartCount": 0, "containerID": "containerd://1"}]);
        pod
    };
    let moved = running(
        "shop",
        "moved-tag",
        "multi:1",
        "arm-1",
        Some(("ReplicaSet", "rs")),
    );
    server.apply("pods", with_status(moved, &stale_id));
    let placed = running(
        "shop",
        "placed",
        "amd:1",
        "amd-1",
        Some(("ReplicaSet", "rs")),
    );
    server.apply("pods", with_status(placed, &fine_id));
    for i in 0..30 {
        let pod = running("bank", &format!("p-{i}"), "multi:1", "arm-1", None);
        server.apply("pods", pod);
    }
    let metrics = HandlerMetrics::default();
    let supervisor = Supervisor::new(CancellationToken::new());
    start(
        client(&server),
        evictions(&server),
        Some(inspector),
        options(10, Duration::from_millis(100)),
        metrics.clone(),
        &supervisor.tasks(),
    );
    eventually("the pod judged by the digest it runs", || {
        events(&server, "moved-tag")
            .iter()
            .any(|(r, n)| r == "MisplacedPodNotCorrected" && n.contains("has no linux/arm64 build"))
    })
    .await;
    // Every pod looked at (32, ten a scan).
    let reads = |server: &FakeApiServer| {
        server
            .requests()
            .iter()
            .filter(|r| r.starts_with("GET /api/v1/namespaces/") && r.contains("/pods/"))
            .count()
    };
    eventually("every pod read in turn", || reads(&server) >= 32).await;
    assert!(
        events(&server, "placed").is_empty(),
        "its digest runs on its node"
    );
    let requests = server.requests();
    assert!(
        !requests
            .iter()
            .any(|r| r == "GET /api/v1/pods" || r == "GET /api/v1/nodes"),
        "pods or nodes listed whole: {:?}",
        requests
            .iter()
            .filter(|r| r.contains("/api/v1/pods") || r.contains("/api/v1/nodes"))
            .collect::<Vec<_>>()
    );
    let node_lists = server
        .requests_with_query()
        .iter()
        .filter(|r| r.starts_with("GET /api/v1/nodes") && !r.contains("watch=true"))
        .count();
    assert_eq!(node_lists, 1, "the nodes are listed once, then watched");
    // Everything the handler asked, its RBAC grants (a watch needs `watch`).
    let rules = rbac::rules(&[
        multiarch_operator::install::enoexec_handler_cluster_rules(),
        multiarch_operator::install::enoexec_handler_namespace_rules(),
    ]);
    rbac::assert_granted_with_queries(&rules, &server.requests_with_query());
}
