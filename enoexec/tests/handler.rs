//! `multiarch enoexec-handler` against the fake API server: the report on the pod (event,
//! label, object deleted), every way an object is invalid, retries after API errors, and
//! the whole path from a kernel record on a node to the event on the pod.
#![allow(clippy::unwrap_used)]

use multiarch_test_support::fake_cri;
use multiarch_test_support::table_inspector;

use std::{sync::Arc, time::Duration};

use multiarch_enoexec::handler::{HandlerOptions, metrics::HandlerMetrics, start};
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_inspector::ImageInspector;
use multiarch_runtime::supervisor::Supervisor;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const OBJECTS: &str = "multiarch.openshift.io/enoexecevents";
const CID: &str = "containerd://4d3c1f2a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c";

fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// As the handler's eviction client: no retries of 429.
fn evictions(server: &FakeApiServer) -> kube::Client {
    let mut config = kube::Config::new(server.url().parse().unwrap());
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

fn handler(
    server: &FakeApiServer,
    inspector: Option<Arc<dyn ImageInspector>>,
    metrics: &HandlerMetrics,
) -> Supervisor {
    let options = HandlerOptions {
        namespace: "multiarch".into(),
        identity: "test".into(),
        incomplete_grace: Duration::from_millis(300),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        correction_scan_interval: Duration::from_secs(3600),
        correction_scan_max_pods: 100,
        election: None,
    };
    start_with(server, inspector, options, metrics)
}

/// A handler with its own supervisor: its tasks run while the supervisor is kept.
fn start_with(
    server: &FakeApiServer,
    inspector: Option<Arc<dyn ImageInspector>>,
    options: HandlerOptions,
    metrics: &HandlerMetrics,
) -> Supervisor {
    let supervisor = Supervisor::new(CancellationToken::new());
    start(
        client(server),
        evictions(server),
        inspector,
        options,
        metrics.clone(),
        &supervisor.tasks(),
    );
    supervisor
}

fn node(server: &FakeApiServer, name: &str, arch: &str) {
    server.apply(
        "nodes",
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch}}}),
    );
}

fn pod(server: &FakeApiServer, name: &str, node: &str, image: &str) {
    server.apply(
        "pods",
        json!({"metadata": {"name": name, "namespace": "shop", "labels": {"app": "web"}},
               "spec": {"nodeName": node, "containers": [{"name": "app", "image": image}]},
               "status": {"phase": "Running", "containerStatuses": [
                   {"name": "sidecar", "image": "quay.io/x/proxy:2", "containerID": "containerd://0000000000000000000000000000000000000000000000000000000000000000", "imageID": "", "ready": true, "restartCount": 0},
                   {"name": "app", "image": image, "containerID": CID, "imageID": "", "ready": false, "restartCount": 3}]}}),
    );
}

fn object(server: &FakeApiServer, name: &str, status: Option<Value>) {
    let mut object = json!({"metadata": {"name": name, "namespace": "multiarch"}, "spec": {}});
    if let Some(status) = status {
        object["status"] = status;
    }
    server.apply(OBJECTS, object);
}

fn status(pod: &str, node: &str) -> Value {
    json!({"nodeName": node, "podName": pod, "podNamespace": "shop", "containerID": CID})
}

async fn gone(server: &FakeApiServer, name: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while server.get(OBJECTS, "multiarch", name).is_some() {
        assert!(tokio::time::Instant::now() < deadline, "{name} still there");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The handler deletes an object, then counts it: wait for the count too.
async fn handled(metrics: &HandlerMetrics, count: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metrics.reported.get() + metrics.invalid.get() < count {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} objects never counted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn events_on(server: &FakeApiServer, pod: &str) -> Vec<Value> {
    server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == pod)
        .collect()
}

#[tokio::test]
async fn the_error_is_reported_on_the_pod_and_the_object_deleted() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    let _h = handler(&server, Some(table_inspector::standard()), &metrics);
    node(&server, "arm-1", "arm64");
    pod(&server, "web", "arm-1", "amd:1");
    object(&server, "e1", Some(status("web", "arm-1")));
    gone(&server, "e1").await;
    handled(&metrics, 1).await;

    let events = events_on(&server, "web");
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["reason"], "ExecFormatError");
    assert_eq!(
        event["note"],
        "container app (image amd:1) cannot run on this arm64 node: exec format error; the image has no arm64 build"
    );
    assert_eq!(event["regarding"]["kind"], "Pod");
    assert_eq!(event["regarding"]["namespace"], "shop");
    assert_eq!(event["reportingController"], "multiarch-enoexec-handler");
    let labels = &server.get("pods", "shop", "web").unwrap()["metadata"]["labels"];
    assert_eq!(labels["multiarch.openshift.io/exec-format-error"], "true");
    assert_eq!(labels["app"], "web", "other labels are kept");
    assert_eq!(metrics.reported.get(), 1);
    assert_eq!(metrics.invalid.get(), 0);
}

#[tokio::test]
async fn the_message_says_what_is_known_about_the_image() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    let _h = handler(&server, Some(table_inspector::standard()), &metrics);
    node(&server, "arm-1", "arm64");
    // The image has an arm64 build: a binary inside it is wrong.
    pod(&server, "multi", "arm-1", "multi:1");
    object(&server, "e1", Some(status("multi", "arm-1")));
    // The registry cannot say (unknown to the inspector).
    pod(&server, "private", "arm-1", "private:1");
    object(&server, "e2", Some(status("private", "arm-1")));
    // The container ID no longer appears in the pod's status.
    pod(&server, "restarted", "arm-1", "amd:1");
    let mut other = status("restarted", "arm-1");
    other["containerID"] = json!(format!("containerd://{}", "f".repeat(64)));
    object(&server, "e3", Some(other));
    for name in ["e1", "e2", "e3"] {
        gone(&server, name).await;
    }
    handled(&metrics, 3).await;
    let note = |pod: &str| {
        events_on(&server, pod)[0]["note"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        note("multi"),
        "container app (image multi:1) cannot run on this arm64 node: exec format error; the image's arm64 build contains a binary built for another architecture"
    );
    assert_eq!(
        note("private"),
        "container app (image private:1) cannot run on this arm64 node: exec format error; check that the image is built for arm64"
    );
    assert_eq!(
        note("restarted"),
        "a container of this pod cannot run on this arm64 node: exec format error; check that the image is built for arm64"
    );
    assert_eq!(metrics.reported.get(), 3);
}

/// Seen on a real node: a binary that cannot exec fails at once, and the daemon's report
/// can reach the handler before the kubelet has written the container's ID into the pod's
/// status. The handler waits for it (within its grace) instead of reporting "a container
/// of this pod"; by then the container may have crashed and been replaced, so the ID is
/// found in its last state.
#[tokio::test]
async fn a_report_ahead_of_the_kubelet_waits_for_the_pod_s_status() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    let options = HandlerOptions {
        namespace: "multiarch".into(),
        identity: "test".into(),
        // Long enough that only the status arriving can end the wait in this test.
        incomplete_grace: Duration::from_secs(30),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        correction_scan_interval: Duration::from_secs(3600),
        correction_scan_max_pods: 100,
        election: None,
    };
    let _h = start_with(
        &server,
        Some(table_inspector::standard()),
        options,
        &metrics,
    );
    node(&server, "arm-1", "arm64");
    let spec = json!({"nodeName": "arm-1", "containers": [{"name": "app", "image": "amd:1"}]});
    server.apply(
        "pods",
        json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": spec,
               "status": {"phase": "Pending", "containerStatuses": [
                   {"name": "app", "image": "amd:1", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}}}]}}),
    );
    object(&server, "early", Some(status("web", "arm-1")));
    // The handler has read the pod and found no such container: it waits.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !server
        .requests()
        .iter()
        .any(|r| r == "GET /api/v1/namespaces/shop/pods/web")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pod was never read"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(events_on(&server, "web").is_empty(), "reported too early");
    assert!(server.get(OBJECTS, "multiarch", "early").is_some());

    // The kubelet's status: the failed container already replaced by the next attempt.
    server.apply(
        "pods",
        json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": spec,
               "status": {"phase": "Running", "containerStatuses": [
                   {"name": "app", "image": "docker.io/library/amd:1", "imageID": "", "ready": false, "restartCount": 1,
                    "containerID": format!("containerd://{}", "e".repeat(64)),
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "containerID": CID}}}]}}),
    );
    gone(&server, "early").await;
    handled(&metrics, 1).await;
    // Named, with the image as the pod asks for it (not the runtime's normalised one).
    assert_eq!(
        events_on(&server, "web")[0]["note"],
        "container app (image amd:1) cannot run on this arm64 node: exec format error; the image has no arm64 build"
    );
}

#[tokio::test]
async fn without_an_inspector_the_message_does_not_guess() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    let _h = handler(&server, None, &metrics);
    node(&server, "z-1", "s390x");
    pod(&server, "web", "z-1", "amd:1");
    object(&server, "e1", Some(status("web", "z-1")));
    gone(&server, "e1").await;
    assert_eq!(
        events_on(&server, "web")[0]["note"],
        "container app (image amd:1) cannot run on this s390x node: exec format error; check that the image is built for s390x"
    );
}

#[tokio::test]
async fn objects_about_vanished_pods_and_nodes_are_cleaned_up_and_counted() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    let _h = handler(&server, None, &metrics);
    node(&server, "arm-1", "arm64");
    pod(&server, "moved", "arm-2", "amd:1"); // recreated on another node
    pod(&server, "orphan", "arm-9", "amd:1"); // its node is gone
    object(&server, "no-pod", Some(status("deleted", "arm-1")));
    object(&server, "moved", Some(status("moved", "arm-1")));
    object(&server, "no-node", Some(status("orphan", "arm-9")));
    for name in ["no-pod", "moved", "no-node"] {
        gone(&server, name).await;
    }
    handled(&metrics, 3).await;
    assert_eq!(metrics.invalid.get(), 3);
    assert_eq!(metrics.reported.get(), 0);
    for outcome in ["pod_gone", "pod_moved", "node_gone"] {
        assert_eq!(metrics.get(outcome), 1, "{outcome}");
    }
    assert!(server.list("events.k8s.io/events").is_empty());
    let moved = server.get("pods", "shop", "moved").unwrap();
    assert!(moved["metadata"]["labels"]["multiarch.openshift.io/exec-format-error"].is_null());
}

#[tokio::test]
async fn an_object_waits_for_its_status_then_gives_up() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    let _h = handler(&server, None, &metrics);
    node(&server, "arm-1", "arm64");
    pod(&server, "web", "arm-1", "amd:1");
    // Created by a daemon that has not set the status yet: the status arrives in time.
    object(&server, "late", None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        server.get(OBJECTS, "multiarch", "late").is_some(),
        "deleted before its grace"
    );
    object(&server, "late", Some(status("web", "arm-1")));
    // Never gets one.
    object(&server, "never", None);
    gone(&server, "late").await;
    gone(&server, "never").await;
    handled(&metrics, 2).await;
    assert_eq!(metrics.reported.get(), 1);
    assert_eq!(metrics.get("incomplete"), 1);
}

#[tokio::test]
async fn api_errors_are_retried() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    node(&server, "arm-1", "arm64");
    pod(&server, "web", "arm-1", "amd:1");
    // The pod label patch fails twice (events go through POST, not PATCH).
    server.fail_next_patches(500, 2);
    object(&server, "e1", Some(status("web", "arm-1")));
    let _h = handler(&server, None, &metrics);
    gone(&server, "e1").await;
    handled(&metrics, 1).await;
    assert_eq!(metrics.get("api_error"), 2);
    assert_eq!(metrics.reported.get(), 1);
    // Retried passes did not post the event again.
    let events = events_on(&server, "web");
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0]["series"].is_null(), "{events:?}");
    let labels = &server.get("pods", "shop", "web").unwrap()["metadata"]["labels"];
    assert_eq!(labels["multiarch.openshift.io/exec-format-error"], "true");
}

#[tokio::test]
async fn a_standby_replica_leaves_objects_to_the_leader() {
    use multiarch_runtime::leader_election::ElectionConfig;
    let server = FakeApiServer::start().await;
    node(&server, "arm-1", "arm64");
    pod(&server, "web", "arm-1", "amd:1");
    object(&server, "e1", Some(status("web", "arm-1")));
    // Another replica leads (its lease is fresh when this one starts).
    server.apply(
        "coordination.k8s.io/leases",
        json!({"metadata": {"name": "multiarch-enoexec-handler", "namespace": "multiarch"},
               "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 1,
                        "acquireTime": "2026-11-22T00:00:00.000000Z", "renewTime": "2026-11-22T00:00:00.000000Z",
                        "leaseTransitions": 0}}),
    );
    let metrics = HandlerMetrics::default();
    let options = HandlerOptions {
        namespace: "multiarch".into(),
        identity: "replica-b".into(),
        incomplete_grace: Duration::from_secs(1),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        correction_scan_interval: Duration::from_secs(3600),
        correction_scan_max_pods: 100,
        election: Some(ElectionConfig {
            namespace: "multiarch".into(),
            lease_name: "multiarch-enoexec-handler".into(),
            identity: "replica-b".into(),
            lease_duration: Duration::from_secs(1),
            renew_deadline: Duration::from_millis(700),
            retry_period: Duration::from_millis(100),
        }),
    };
    let _h = start_with(&server, None, options, &metrics);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        server.get(OBJECTS, "multiarch", "e1").is_some(),
        "handled while standby"
    );
    assert!(events_on(&server, "web").is_empty());
    // replica-a stopped renewing: this replica takes over and handles the object.
    gone(&server, "e1").await;
    handled(&metrics, 1).await;
    let lease = server
        .get(
            "coordination.k8s.io/leases",
            "multiarch",
            "multiarch-enoexec-handler",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-b");
    assert_eq!(metrics.reported.get(), 1);
}

/// The whole path: a kernel record on node arm-1 → the daemon (host /proc, CRI runtime) →
/// an ENoExecEvent → the handler → the event and label on the pod.
#[tokio::test]
async fn from_a_kernel_record_to_the_event_on_the_pod() {
    use multiarch_ebpf::{
        cri::CriClient,
        event::{ExecEvent, ExecSyscall},
        locate::Locator,
    };
    use multiarch_enoexec::daemon::{Daemon, DaemonOptions, metrics::DaemonMetrics};

    let server = FakeApiServer::start().await;
    node(&server, "arm-1", "arm64");
    pod(&server, "web", "arm-1", "amd:1");
    let pod_uid = server.get("pods", "shop", "web").unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_owned();
    let container_id = CID.trim_start_matches("containerd://");
    let cri = fake_cri::FakeCri::start("containerd").await;
    cri.add(fake_cri::FakeContainer {
        id: container_id.into(),
        name: "app".into(),
        pod: "web".into(),
        namespace: "shop".into(),
        pod_uid: pod_uid.clone(),
        image: "amd:1".into(),
        kubernetes: true,
    });
    let proc = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(proc.path().join("4242")).unwrap();
    std::fs::write(
        proc.path().join("4242/cgroup"),
        format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{container_id}.scope\n",
            pod_uid.replace('-', "_")
        ),
    )
    .unwrap();
    let runtime = CriClient::connect(cri.socket(), Duration::from_secs(5))
        .await
        .unwrap();
    let daemon_tasks = Supervisor::new(CancellationToken::new());
    let daemon = Daemon::start(
        client(&server),
        Locator::new(proc.path().into(), None, runtime),
        DaemonOptions {
            node_name: "arm-1".into(),
            namespace: "multiarch".into(),
            rate: 5.0,
            burst: 10,
            dedup_window: Duration::from_secs(60),
            queue_capacity: 256,
            retry_backoff: Duration::from_millis(10),
            log_read_interval: Duration::from_millis(10),
        },
        DaemonMetrics::default(),
        &daemon_tasks.tasks(),
    );
    let metrics = HandlerMetrics::default();
    let _h = handler(&server, Some(table_inspector::standard()), &metrics);

    let record = ExecEvent {
        pid: 4242,
        tgid: 4242,
        ppid: 4200,
        ret: -8,
        cgroup_id: 0,
        syscall: ExecSyscall::Execve,
        comm: "runc:[2:INIT]".into(),
        filename: Some("/usr/local/bin/app".into()),
    }
    .encode();
    daemon.handle(ExecEvent::decode(&record)).await;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metrics.reported.get() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never reported");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        events_on(&server, "web")[0]["note"],
        "container app (image amd:1) cannot run /usr/local/bin/app on this arm64 node: exec format error; the image has no arm64 build"
    );
    assert!(
        server.list(OBJECTS).is_empty(),
        "the handled object is deleted"
    );
}

/// A program glibc's loader refused to start (the daemon read its line from the
/// container's log): reported as `CPULevelTooLow`, with the node's level and the image's.
#[tokio::test]
async fn a_loader_refusal_is_reported_with_both_levels() {
    let server = FakeApiServer::start().await;
    let metrics = HandlerMetrics::default();
    let _h = handler(&server, Some(table_inspector::standard()), &metrics);
    server.apply(
        "nodes",
        json!({"metadata": {"name": "amd-v2", "labels": {"kubernetes.io/arch": "amd64", "multiarch.openshift.io/arch-variant": "v2"}}}),
    );
    node(&server, "amd-1", "amd64");
    // The loader names the level; the node's label says its own.
    pod(&server, "ubi", "amd-v2", "ubi10:1");
    let mut glibc = status("ubi", "amd-v2");
    glibc["loaderError"] = json!("Fatal glibc error: CPU does not support x86-64-v3");
    object(&server, "e1", Some(glibc));
    // The loader does not name it: the image's inspected builds do.
    pod(&server, "ubi-note", "amd-v2", "ubi10:1");
    let mut note_check = status("ubi-note", "amd-v2");
    note_check["loaderError"] = json!("/usr/bin/app: CPU ISA level is lower than required");
    object(&server, "e2", Some(note_check));
    // Nothing says either level.
    pod(&server, "plain", "amd-1", "amd:1");
    let mut plain = status("plain", "amd-1");
    plain["loaderError"] = json!("/app: CPU ISA level is lower than required");
    object(&server, "e3", Some(plain));
    for name in ["e1", "e2", "e3"] {
        gone(&server, name).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while metrics.get("loader_refusal") < 3 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let event = |pod: &str| {
        let events = events_on(&server, pod);
        assert_eq!(events.len(), 1, "{events:?}");
        (
            events[0]["reason"].as_str().unwrap().to_owned(),
            events[0]["type"].as_str().unwrap().to_owned(),
            events[0]["note"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(
        event("ubi"),
        (
            "CPULevelTooLow".into(),
            "Warning".into(),
            "container app (image ubi10:1) cannot start on this node: glibc's loader refused its CPU (Fatal glibc error: CPU does not support x86-64-v3); the node is x86-64-v2, the image needs x86-64-v3".into()
        )
    );
    assert_eq!(
        event("ubi-note").2,
        "container app (image ubi10:1) cannot start on this node: glibc's loader refused its CPU (/usr/bin/app: CPU ISA level is lower than required); the node is x86-64-v2, the image needs x86-64-v3"
    );
    assert_eq!(
        event("plain").2,
        "container app (image amd:1) cannot start on this node: glibc's loader refused its CPU (/app: CPU ISA level is lower than required); the node does not say its x86-64 level, the level its program needs was not read from the image (binaryInspection reads it)"
    );
    let labels = &server.get("pods", "shop", "ubi").unwrap()["metadata"]["labels"];
    assert_eq!(labels["multiarch.openshift.io/exec-format-error"], "true");
    // Not exec format errors: MTO's counter of those stays at zero.
    assert_eq!(metrics.reported.get(), 0);
    assert_eq!(metrics.get("reported"), 0);
}
