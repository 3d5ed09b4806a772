//! The gate controller against the fake API server: success, inspection failures with
//! backoff then fallback, no common architecture, a PodPlacementConfig created just
//! before the pod, a pod modified between read and write, and a pod's images inspected
//! together within a deadline.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::table_inspector;

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use multiarch_inspector::{ImageInfo, ImageInspector, InspectError, InspectRequest};

use multiarch_admission::gate::{controller::start, metrics::GateMetrics, options::GateOptions};
use multiarch_crd::UnknownNodeLevel;
use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault, Method};
use multiarch_policy::node_level::x86_64_level_alternatives;
use multiarch_runtime::supervisor::Supervisor;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn options() -> GateOptions {
    GateOptions {
        own_namespace: "multiarch".into(),
        identity: "test".into(),
        concurrency: 4,
        images_at_once: 4,
        pod_inspection_deadline: Duration::from_secs(30),
        max_attempts: 3,
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        election: None,
    }
}

fn controller_with(
    server: &FakeApiServer,
    options: GateOptions,
    metrics: &GateMetrics,
) -> Supervisor {
    controller_using(server, options, metrics, table_inspector::standard())
}

fn controller_using(
    server: &FakeApiServer,
    options: GateOptions,
    metrics: &GateMetrics,
    inspector: Arc<dyn ImageInspector>,
) -> Supervisor {
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    // The controller's tasks run while the supervisor is kept.
    let supervisor = Supervisor::new(CancellationToken::new());
    start(
        client,
        inspector,
        options,
        metrics.clone(),
        &supervisor.tasks(),
    );
    supervisor
}

fn controller(server: &FakeApiServer) -> Supervisor {
    controller_with(server, options(), &GateMetrics::default())
}

fn gated(name: &str, images: &[&str], labels: Value) -> Value {
    let containers: Vec<Value> = images
        .iter()
        .enumerate()
        .map(|(i, image)| json!({"name": format!("c{i}"), "image": image}))
        .collect();
    json!({"metadata": {"name": name, "namespace": "shop", "labels": labels},
           "spec": {"containers": containers, "schedulingGates": [{"name": "multiarch.openshift.io/scheduling-gate"}]},
           "status": {"phase": "Pending"}})
}

async fn ungated(server: &FakeApiServer, name: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let pod = server.get("pods", "shop", name).unwrap();
        if pod["spec"]["schedulingGates"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            return pod;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name} still gated: {pod}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn reasons(server: &FakeApiServer, pod: &str) -> Vec<String> {
    server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == pod)
        .map(|e| e["reason"].as_str().unwrap().to_owned())
        .collect()
}

fn required(pod: &Value) -> Value {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_pods_get_the_architecture_affinity_and_lose_the_gate() {
    let server = FakeApiServer::start().await;
    let _c = controller(&server);
    server.apply("pods", gated("web", &["multi:1", "amd:1"], json!({})));
    let pod = ungated(&server, "web").await;
    assert_eq!(
        required(&pod),
        json!([{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            // Every build is linux: the OS is required too (MTO writes the arch only).
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        ]}])
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/node-affinity"],
        "set"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"],
        "removed"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/single-arch"],
        ""
    );
    // The pass publishes its events after it ungated the pod.
    eventually("MTO's three events", || {
        let r = reasons(&server, "web");
        r.contains(&"ArchAwareSchedGateAdded".to_owned())
            && r.contains(&"ArchAwarePredicateSet".to_owned())
            && r.contains(&"ArchAwareSchedGateRemovalSuccess".to_owned())
    })
    .await;

    server.apply(
        "pods",
        gated("nothing-common", &["amd:1", "arm:1"], json!({})),
    );
    let pod = ungated(&server, "nothing-common").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["key"],
        "multiarch.openshift.io/no-supported-arch"
    );
}

/// Gate mode writes the x86-64 level an image's amd64 build needs, as the scheduler
/// filters it: amd64 nodes labelled below v3 are kept away, nodes that say nothing are
/// not, and a node without the label is judged by node-feature-discovery's flags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x86_64_v3_build_gets_the_level_in_its_affinity() {
    let server = FakeApiServer::start().await;
    let _c = controller(&server);
    server.apply("pods", gated("rhel10", &["ubi10:1"], json!({})));
    let pod = ungated(&server, "rhel10").await;
    let arch =
        |values: &[&str]| json!({"key": "kubernetes.io/arch", "operator": "In", "values": values});
    let linux = json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]});
    let amd64_terms = x86_64_level_alternatives(3, UnknownNodeLevel::AnyLevel)
        .into_iter()
        .map(|alternative| {
            let mut expressions = vec![arch(&["amd64"])];
            expressions.extend(alternative.iter().map(|e| json!(e)));
            expressions.push(linux.clone());
            json!({"matchExpressions": expressions})
        });
    assert_eq!(
        required(&pod),
        Value::Array(
            std::iter::once(json!({"matchExpressions": [arch(&["arm64"]), linux.clone()]}))
                .chain(amd64_terms)
                .collect()
        )
    );
    assert_eq!(
        required(&pod)[2],
        json!({"matchExpressions": [
            arch(&["amd64"]),
            {"key": "multiarch.openshift.io/arch-variant", "operator": "DoesNotExist"},
            {"key": "feature.node.kubernetes.io/cpu-cpuid.CMPXCHG8", "operator": "NotIn", "values": ["true"]},
            linux,
        ]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_inspections_back_off_then_use_the_fallback() {
    let server = FakeApiServer::start().await;
    server.apply("multiarch.openshift.io/clusterpodplacementconfigs", json!({"metadata": {"name": "cluster"}, "spec": {"fallbackArchitecture": "arm64", "placement": {"mode": "SchedulingGate"}}}));
    let _c = controller(&server);
    let started = std::time::Instant::now();
    server.apply("pods", gated("private", &["quay.io/private:1"], json!({})));
    let pod = ungated(&server, "private").await;
    // Three attempts with 100 ms and 200 ms waits between them.
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/image-inspect-error-count"],
        "3"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/fallback-arch"],
        "arm64"
    );
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["arm64"])
    );
    assert!(
        pod["metadata"]["annotations"]["multiarch.openshift.io/image-inspect-error"]
            .as_str()
            .unwrap()
            .starts_with("unauthorized at quay.io")
    );
    // Three passes, one gate announcement (not repeated as an event series either).
    let added: Vec<Value> = server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == "private" && e["reason"] == "ArchAwareSchedGateAdded")
        .collect();
    assert_eq!(added.len(), 1, "{added:?}");
    assert!(added[0]["series"].is_null(), "{added:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_created_just_before_the_pod_applies() {
    let server = FakeApiServer::start().await;
    let _c = controller(&server);
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"}, "spec": {}}),
    );
    server.apply("multiarch.openshift.io/podplacementconfigs", json!({"metadata": {"name": "prefer-arm", "namespace": "shop"},
        "spec": {"priority": 5, "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 60}]}}}}));
    server.apply("pods", gated("fresh", &["multi:1"], json!({"app": "web"})));
    let pod = ungated(&server, "fresh").await;
    let preferred =
        &pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(preferred[0]["weight"], 60);
    assert_eq!(
        preferred[0]["preference"]["matchExpressions"][0]["values"],
        json!(["arm64"])
    );
    assert_eq!(
        pod["metadata"]["annotations"]["multiarch.openshift.io/preferred-affinity-sources"],
        "arm64:60:PodPlacementConfig-prefer-arm"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/preferred-node-affinity"],
        "set"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_gate_removal_is_told_on_the_pod_and_retried() {
    let server = FakeApiServer::start().await;
    // The first write that would remove the gate is refused.
    server.inject(
        Fault::new(
            Some(Method::PATCH),
            "/api/v1/namespaces/shop/pods/refused",
            Effect::Status(500),
        )
        .times(1),
    );
    let _c = controller(&server);
    server.apply("pods", gated("refused", &["multi:1"], json!({})));
    eventually("the refusal told on the pod", || {
        reasons(&server, "refused").contains(&"ArchAwareSchedGateRemovalFailed".to_owned())
    })
    .await;
    let failed: Vec<Value> = server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| {
            e["regarding"]["name"] == "refused" && e["reason"] == "ArchAwareSchedGateRemovalFailed"
        })
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["type"], "Warning");
    assert_eq!(
        failed[0]["note"],
        "Failed to remove the scheduling gate \"multiarch.openshift.io/scheduling-gate\": \
         Internal error occurred: injected fault on /api/v1/namespaces/shop/pods/refused (500)"
    );
    // Retried: the next pass removes the gate, and says so.
    let pod = ungated(&server, "refused").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["amd64", "arm64"])
    );
    eventually("the removal told on the pod", || {
        reasons(&server, "refused").contains(&"ArchAwareSchedGateRemovalSuccess".to_owned())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_modified_between_read_and_write_is_processed_again() {
    let server = FakeApiServer::start().await;
    // The controller's write waits until the test has changed the pod under it.
    server.inject(Fault::new(
        Some(Method::PATCH),
        "/api/v1/namespaces/shop/pods/raced",
        Effect::Hang,
    ));
    let _c = controller(&server);
    server.apply("pods", gated("raced", &["multi:1"], json!({})));
    let patches = || {
        server
            .requests()
            .iter()
            .filter(|r| r.starts_with("PATCH /api/v1/namespaces/shop/pods/raced"))
            .count()
    };
    eventually("the controller's write under way", || patches() == 1).await;
    let mut changed = server.get("pods", "shop", "raced").unwrap();
    changed["metadata"]["labels"]["team"] = json!("payments");
    server.apply("pods", changed);
    server.clear_faults();
    let pod = ungated(&server, "raced").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["amd64", "arm64"])
    );
    assert_eq!(
        pod["metadata"]["labels"]["team"], "payments",
        "not overwritten"
    );
    assert_eq!(patches(), 2, "the conflict was retried from a fresh read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_newer_than_the_controller_s_api_types_are_kept() {
    let server = FakeApiServer::start().await;
    let _c = controller(&server);
    let mut pod = gated("newer", &["multi:1"], json!({}));
    pod["spec"]["fieldFromANewerRelease"] = json!({"kept": true});
    pod["spec"]["containers"][0]["fieldFromANewerRelease"] = json!("kept");
    server.apply("pods", pod);
    let pod = ungated(&server, "newer").await;
    assert_eq!(pod["spec"]["fieldFromANewerRelease"]["kept"], true);
    assert_eq!(
        pod["spec"]["containers"][0]["fieldFromANewerRelease"],
        "kept"
    );
    assert!(!required(&pod).as_array().unwrap().is_empty());
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.starts_with("PUT /api/v1/namespaces/shop/pods")),
        "no whole-object write of a pod"
    );
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gated_pod_gauge_follows_the_cluster() {
    let server = FakeApiServer::start().await;
    // A pod gated before the controller starts (seen by the initial list) ...
    server.apply("pods", gated("early", &["private:1"], json!({})));
    let metrics = GateMetrics::default();
    let mut slow = options();
    slow.max_attempts = 100; // the unknown image keeps both pods gated while retrying
    let _c = controller_with(&server, slow, &metrics);
    eventually("the listed pod counted", || metrics.gated.get() == 1).await;
    // ... one gated later, one that is ungated at once.
    server.apply("pods", gated("late", &["private:1"], json!({})));
    server.apply("pods", gated("quick", &["multi:1"], json!({})));
    eventually("three gated", || metrics.gated.get() >= 2).await;
    ungated(&server, "quick").await;
    eventually("the ungated pod no longer counted", || {
        metrics.gated.get() == 2
    })
    .await;
    server.delete("pods", "shop", "early");
    eventually("the deleted pod no longer counted", || {
        metrics.gated.get() == 1
    })
    .await;
    // A dropped watch whose history is compacted away (410 Gone) relists: pods deleted
    // meanwhile are not counted any more, though no Delete event reaches the controller.
    server.hold_watches(true);
    server.break_watches();
    server.delete("pods", "shop", "late");
    server.compact();
    server.hold_watches(false);
    eventually(
        "the relist forgets the pod deleted while disconnected",
        || metrics.gated.get() == 0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_replica_leaves_gated_pods_to_the_leader() {
    use multiarch_runtime::leader_election::ElectionConfig;
    let server = FakeApiServer::start().await;
    // replica-a holds the lease and renews it (the test plays replica-a).
    let renew = |n: u32| {
        server.apply(
            "coordination.k8s.io/leases",
            json!({"metadata": {"name": "multiarch-gate-controller", "namespace": "multiarch"},
                   "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 3,
                            "acquireTime": "2026-11-22T00:00:00.000000Z",
                            "renewTime": format!("2026-11-22T00:00:{:02}.000000Z", n % 60),
                            "leaseTransitions": 0}}),
        );
    };
    renew(0);
    let mut standby = options();
    standby.identity = "replica-b".into();
    standby.election = Some(ElectionConfig {
        namespace: "multiarch".into(),
        lease_name: "multiarch-gate-controller".into(),
        identity: "replica-b".into(),
        // Long against the renewals below: only a stall of seconds could let the standby
        // take the lease while replica-a still renews.
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(100),
    });
    let metrics = GateMetrics::default();
    let _c = controller_with(&server, standby, &metrics);
    server.apply("pods", gated("web", &["multi:1"], json!({})));
    for n in 1..=10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        renew(n);
        let pod = server.get("pods", "shop", "web").unwrap();
        assert_eq!(
            pod["spec"]["schedulingGates"].as_array().unwrap().len(),
            1,
            "processed while standby"
        );
    }
    assert_eq!(metrics.processed.get(), 0);
    // replica-a stops renewing: replica-b takes over and processes the pod.
    ungated(&server, "web").await;
    let lease = server
        .get(
            "coordination.k8s.io/leases",
            "multiarch",
            "multiarch-gate-controller",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-b");
    // The metric follows the update that removed the gate.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while metrics.processed.get() != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "processed {}",
            metrics.processed.get()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn messages(server: &FakeApiServer, pod: &str, reason: &str) -> Vec<String> {
    server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == pod && e["reason"] == reason)
        .map(|e| e["note"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_configuration_reads_keep_the_gate_until_the_configuration_is_read() {
    use multiarch_fake_apiserver::{Effect, Fault, Method};
    let server = FakeApiServer::start().await;
    server.apply("multiarch.openshift.io/podplacementconfigs", json!({"metadata": {"name": "prefer-arm", "namespace": "shop"},
        "spec": {"priority": 5, "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 60}]}}}}));
    // The ClusterPodPlacementConfig answers 500, then the PodPlacementConfig list does.
    server.inject(Fault::new(
        Some(Method::GET),
        "/clusterpodplacementconfigs/cluster",
        Effect::Status(500),
    ));
    let metrics = GateMetrics::default();
    let _c = controller_with(
        &server,
        GateOptions {
            max_attempts: 1_000,
            ..options()
        },
        &metrics,
    );
    server.apply("pods", gated("web", &["multi:1"], json!({})));
    eventually("three failed reads", || {
        metrics.configuration_read_errors.get() >= 3
    })
    .await;
    server.clear_faults();
    server.inject(Fault::new(
        Some(Method::GET),
        "/namespaces/shop/podplacementconfigs",
        Effect::Status(500),
    ));
    let before = metrics.configuration_read_errors.get();
    eventually("two more failed reads", || {
        metrics.configuration_read_errors.get() >= before + 2
    })
    .await;
    let pod = server.get("pods", "shop", "web").unwrap();
    assert_eq!(
        pod["spec"]["schedulingGates"][0]["name"], "multiarch.openshift.io/scheduling-gate",
        "the gate was removed while the configuration could not be read: {pod}"
    );
    assert!(pod["spec"]["affinity"].is_null(), "{pod}");
    eventually("the unreadable configuration told on the pod", || {
        messages(&server, "web", "ArchAwareConfigurationUnreadable")
            .iter()
            .any(|n| n.starts_with(
                "cannot read the placement configuration (attempt 1 of 1000; the gate stays until it is read)"
            ))
    })
    .await;

    server.clear_faults();
    let pod = ungated(&server, "web").await;
    let preferred =
        &pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
    assert_eq!(preferred[0]["weight"], 60, "{pod}");
    assert!(!required(&pod).is_null(), "{pod}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_attempts_the_pod_goes_on_with_its_images_architectures_only() {
    use multiarch_fake_apiserver::{Effect, Fault, Method};
    let server = FakeApiServer::start().await;
    server.inject(Fault::new(
        Some(Method::GET),
        "/clusterpodplacementconfigs/cluster",
        Effect::Status(500),
    ));
    let metrics = GateMetrics::default();
    let _c = controller_with(&server, options(), &metrics);
    server.apply("pods", gated("web", &["arm:1"], json!({})));
    let pod = ungated(&server, "web").await;
    assert_eq!(metrics.configuration_read_errors.get(), 3);
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["arm64"]),
        "{pod}"
    );
    assert!(
        pod["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            .is_null()
    );
    eventually("the event of placing without configuration", || {
        !messages(&server, "web", "ArchAwarePlacedWithoutConfiguration").is_empty()
    })
    .await;
    let notes = messages(&server, "web", "ArchAwarePlacedWithoutConfiguration");
    assert_eq!(
        notes,
        [
            "cannot read the placement configuration after 3 attempts; placing by the images' architectures without preferences or fallback: \
          Internal error occurred: injected fault on /apis/multiarch.openshift.io/v1beta1/clusterpodplacementconfigs/cluster (500)"
        ]
    );
}

/// Answers `amd:1`-like images only once `at_once` lookups are waiting together, and
/// never answers `hang:1`: a pod's images inspected one after another would never pass.
struct Gathering {
    together: tokio::sync::Barrier,
    table: Arc<dyn ImageInspector>,
}

#[async_trait]
impl ImageInspector for Gathering {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        if request.image == "hang:1" {
            std::future::pending::<()>().await;
        }
        self.together.wait().await;
        self.table
            .inspect(&InspectRequest {
                image: "amd:1".into(),
                ..request.clone()
            })
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_images_are_inspected_together_within_a_deadline() {
    let server = FakeApiServer::start().await;
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"}, "spec": {"placement": {"mode": "SchedulingGate"}}}),
    );
    let inspector = Arc::new(Gathering {
        together: tokio::sync::Barrier::new(4),
        table: table_inspector::standard(),
    });
    let _c = controller_using(
        &server,
        GateOptions {
            max_attempts: 1,
            pod_inspection_deadline: Duration::from_millis(300),
            ..options()
        },
        &GateMetrics::default(),
        inspector,
    );
    // Four images, answered only when all four are asked at once.
    server.apply(
        "pods",
        gated("four", &["a:1", "b:1", "c:1", "d:1"], json!({})),
    );
    let pod = ungated(&server, "four").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["amd64"])
    );
    // An image that never answers: the pass gives up at the deadline and, its one
    // attempt spent, the pod goes on without an architecture constraint.
    server.apply("pods", gated("stuck", &["hang:1"], json!({})));
    let pod = ungated(&server, "stuck").await;
    assert!(required(&pod).is_null(), "{pod}");
    let error = pod["metadata"]["annotations"]["multiarch.openshift.io/image-inspect-error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.contains("images were not all inspected within 300ms"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn architecture_rules_decide_gated_pods_without_inspection() {
    let server = FakeApiServer::start().await;
    let metrics = GateMetrics::default();
    let _c = controller_with(&server, options(), &metrics);
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "tiers", "namespace": "shop"}, "spec": {"priority": 1,
            "plugins": {"celArchitecturePlacement": {"enabled": true, "fallbackArchitectures": ["amd64"],
                "rules": [
                    {"name": "db", "expression": "'tier' in self.metadata.labels && self.metadata.labels['tier'] == 'db'", "architectures": ["ppc64le"]},
                    {"name": "arm-tier", "expression": "self.metadata.labels['tier'] == 'arm'", "architectures": ["arm64"]}
                ]}}}}),
    );
    // An image no registry answers for: a rule decides without asking.
    server.apply(
        "pods",
        gated("pg-0", &["unreachable.example/pg:1"], json!({"tier": "db"})),
    );
    let pod = ungated(&server, "pg-0").await;
    assert_eq!(
        required(&pod),
        json!([{"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["ppc64le"]}]}])
    );
    assert_eq!(
        pod["metadata"]["annotations"]["multiarch.openshift.io/architecture-rule"],
        "PodPlacementConfig-tiers/db"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/node-affinity"],
        "set"
    );
    // The pass publishes its events after it ungated the pod.
    eventually("the rule's event", || {
        !messages(&server, "pg-0", "ArchAwarePredicateSet").is_empty()
    })
    .await;
    assert_eq!(
        messages(&server, "pg-0", "ArchAwarePredicateSet"),
        ["Set the supported architectures to {ppc64le} by rule \"db\" of PodPlacementConfig tiers"]
    );
    assert!(!reasons(&server, "pg-0").contains(&"ArchAwareInspectionError".to_owned()));

    // A rule against the images (amd64 only): ungated on it, then warned about.
    server.apply("pods", gated("armed", &["amd:1"], json!({"tier": "arm"})));
    let pod = ungated(&server, "armed").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["arm64"])
    );
    eventually("the override warning", || {
        !messages(&server, "armed", "ArchitectureRuleOverridesImages").is_empty()
    })
    .await;
    assert_eq!(
        messages(&server, "armed", "ArchitectureRuleOverridesImages"),
        [
            "rule \"arm-tier\" of PodPlacementConfig tiers places the pod on arm64, where its images have no build (images support amd64); the rule is obeyed"
        ]
    );
    assert_eq!(metrics.architecture_rule_overrides.get(), 1);
    // A pod without `tier`: `arm-tier` indexes a missing key, an error that is counted
    // and does not match; the fallback decides.
    server.apply("pods", gated("plain", &["multi:1"], json!({})));
    let pod = ungated(&server, "plain").await;
    assert_eq!(
        required(&pod)[0]["matchExpressions"][0]["values"],
        json!(["amd64"])
    );
    eventually("the rule error counted", || {
        metrics.architecture_rule_errors.get() >= 1
    })
    .await;
}
