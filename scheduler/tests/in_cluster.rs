//! `multiarch scheduler` in a cluster, against the in-process fake API server: watches,
//! binding (and its conflicts), events, conditions, restarts, leader election, hot
//! reloaded configuration and relists after `410 Gone`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Duration;

use common::{
    bindings, events_for, eventually, leader_and_standby, node, node_of, options, pod, start,
    start_with,
};
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_bound_to_compatible_nodes_and_users_see_why() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("amd-1", "amd64", "4"));
    server.apply("nodes", node("arm-1", "arm64", "4"));
    // Someone else's pod fills amd-1's cpu: it must count.
    let mut hog = pod("hog", "amd:1", "4");
    hog["spec"]["schedulerName"] = json!("default-scheduler");
    hog["spec"]["nodeName"] = json!("amd-1");
    server.apply("pods", hog);
    server.apply("pods", pod("web-arm", "arm:1", "1"));
    server.apply("pods", pod("web-multi", "multi:1", "1"));
    server.apply("pods", pod("web-amd", "amd:1", "1"));
    server.apply("pods", pod("mainframe", "z:1", "1"));
    let mut other = pod("other", "multi:1", "1");
    other["spec"]["schedulerName"] = json!("default-scheduler");
    server.apply("pods", other);

    let runtime = start(&server, "a", false);
    eventually("web-arm and web-multi bound", || {
        node_of(&server, "web-arm").is_some() && node_of(&server, "web-multi").is_some()
    })
    .await;
    assert_eq!(node_of(&server, "web-arm").as_deref(), Some("arm-1"));
    assert_eq!(
        node_of(&server, "web-multi").as_deref(),
        Some("arm-1"),
        "amd-1 is full"
    );
    eventually("FailedScheduling for web-amd", || {
        !events_for(&server, "web-amd").is_empty()
    })
    .await;
    eventually("condition for mainframe", || {
        server.get("pods", "shop", "mainframe").unwrap()["status"]["conditions"][0]["reason"]
            == "Unschedulable"
    })
    .await;
    assert!(
        node_of(&server, "other").is_none(),
        "pods of other schedulers are not ours"
    );

    eventually("Scheduled event for web-arm", || {
        !events_for(&server, "web-arm").is_empty()
    })
    .await;
    let scheduled = events_for(&server, "web-arm");
    assert_eq!(scheduled[0]["reason"], "Scheduled");
    assert_eq!(scheduled[0]["type"], "Normal");
    assert_eq!(scheduled[0]["reportingController"], "multiarch-scheduler");
    assert_eq!(
        scheduled[0]["note"],
        "Successfully assigned shop/web-arm to arm-1 (arm64); images support arm64"
    );
    let failed = events_for(&server, "web-amd");
    assert_eq!(failed[0]["reason"], "FailedScheduling");
    assert_eq!(failed[0]["type"], "Warning");
    assert_eq!(
        failed[0]["note"],
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match the pod's image architectures (images support amd64). no new claims to deallocate, preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
    );
    let condition = &server.get("pods", "shop", "mainframe").unwrap()["status"]["conditions"][0];
    assert_eq!(condition["type"], "PodScheduled");
    assert_eq!(condition["status"], "False");
    assert_eq!(
        condition["message"],
        "0/2 nodes are available: 2 node(s) didn't match the pod's image architectures (images support s390x). no new claims to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );

    // Capacity frees up: the waiting pod is bound, once.
    server.delete("pods", "shop", "hog");
    eventually("web-amd bound after the hog left", || {
        node_of(&server, "web-amd").as_deref() == Some("amd-1")
    })
    .await;
    for p in ["web-arm", "web-multi", "web-amd"] {
        assert_eq!(bindings(&server, p), 1, "{p}: one binding call per pod");
    }
    runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_conflicts_drop_or_retry() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "8"));
    server.fail_next_bindings(500, 1);
    server.apply("pods", pod("flaky", "arm:1", "100m"));
    let runtime = start(&server, "a", false);
    // The first binding fails with 500: retried after backoff, then bound.
    eventually("flaky bound after a retry", || {
        node_of(&server, "flaky").is_some()
    })
    .await;
    assert_eq!(bindings(&server, "flaky"), 2);
    assert!(
        events_for(&server, "flaky")
            .iter()
            .any(|e| e["note"].as_str().unwrap().starts_with("Binding rejected:"))
    );

    // A pod that someone else binds first: 409, dropped, not retried.
    server.fail_next_bindings(409, 1);
    server.apply("pods", pod("raced", "arm:1", "100m"));
    eventually("raced attempted", || bindings(&server, "raced") == 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(bindings(&server, "raced"), 1, "a 409 is not retried");
    runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_rebuilds_from_the_watch_without_double_binding() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "2"));
    for i in 0..3 {
        server.apply("pods", pod(&format!("p{i}"), "arm:1", "500m"));
    }
    let first = start(&server, "a", false);
    eventually("first pods bound", || {
        (0..3).all(|i| node_of(&server, &format!("p{i}")).is_some())
    })
    .await;
    first.shutdown().await.unwrap();
    // More pods than the node can take: the new replica must count the bound ones.
    for i in 3..6 {
        server.apply("pods", pod(&format!("p{i}"), "arm:1", "500m"));
    }
    let second = start(&server, "b", false);
    eventually("p3 bound", || node_of(&server, "p3").is_some()).await;
    eventually("p4 reported", || {
        !events_for(&server, "p4").is_empty() || !events_for(&server, "p5").is_empty()
    })
    .await;
    let bound = (0..6)
        .filter(|i| node_of(&server, &format!("p{i}")).is_some())
        .count();
    assert_eq!(bound, 4, "2 cpu / 500m: four pods fit");
    for i in 0..6 {
        assert!(bindings(&server, &format!("p{i}")) <= 1, "p{i} bound twice");
    }
    second.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_binds_and_a_standby_takes_over() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "64"));
    let (a, b) = leader_and_standby(&server).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!*b.leading.borrow(), "the lease is held by replica-a");
    let lease = server
        .get(
            "coordination.k8s.io/leases",
            "multiarch",
            "multiarch-scheduler",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-a");

    server.apply("pods", pod("one", "arm:1", "100m"));
    eventually("one bound", || node_of(&server, "one").is_some()).await;
    // A stops (crash: it stops renewing); B takes over after the lease expires.
    a.task.abort();
    let mut b_leading = b.leading.clone();
    tokio::time::timeout(Duration::from_secs(10), b_leading.wait_for(|l| *l))
        .await
        .unwrap()
        .unwrap();
    let lease = server
        .get(
            "coordination.k8s.io/leases",
            "multiarch",
            "multiarch-scheduler",
        )
        .unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], "replica-b");
    assert_eq!(lease["spec"]["leaseTransitions"], 1);
    server.apply("pods", pod("two", "arm:1", "100m"));
    eventually("two bound by the new leader", || {
        node_of(&server, "two").is_some()
    })
    .await;
    assert_eq!(
        bindings(&server, "one") + bindings(&server, "two"),
        2,
        "never both"
    );
    b.shutdown().await.unwrap();
}

/// Watches two replicas' leadership and records whether both ever led at once.
fn watch_for_two_leaders(
    mut a: tokio::sync::watch::Receiver<bool>,
    mut b: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<(bool, Vec<&'static str>)> {
    tokio::spawn(async move {
        let (mut a_open, mut b_open) = (true, true);
        let mut both = false;
        let mut changes = Vec::new();
        let mut last = (*a.borrow(), *b.borrow());
        while a_open || b_open {
            tokio::select! {
                changed = a.changed(), if a_open => a_open = changed.is_ok(),
                changed = b.changed(), if b_open => b_open = changed.is_ok(),
            }
            let now = (*a.borrow(), *b.borrow());
            both |= now.0 && now.1;
            for (was, is, starts, stops) in [
                (last.0, now.0, "a", "a stops"),
                (last.1, now.1, "b", "b stops"),
            ] {
                if was != is {
                    changes.push(if is { starts } else { stops });
                }
            }
            last = now;
        }
        (both, changes)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_renewal_hangs_stops_before_a_standby_takes_over() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "64"));
    let (a, b) = leader_and_standby(&server).await;
    let monitor = watch_for_two_leaders(a.leading.clone(), b.leading.clone());
    for i in 0..5 {
        server.apply("pods", pod(&format!("p{i}"), "arm:1", "100m"));
    }
    eventually("the first pods bound", || {
        (0..5).all(|i| node_of(&server, &format!("p{i}")).is_some())
    })
    .await;

    // replica-a's next renewal hangs (its API server connection is stuck) for three
    // lease durations (1.5 s each), while pods keep arriving.
    server.inject(
        multiarch_fake_apiserver::Fault::new(
            Some(multiarch_fake_apiserver::Method::PUT),
            "/leases/multiarch-scheduler",
            multiarch_fake_apiserver::Effect::Hang,
        )
        .times(1),
    );
    let hung_at = tokio::time::Instant::now();
    for i in 5..10 {
        server.apply("pods", pod(&format!("p{i}"), "arm:1", "100m"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut b_leading = b.leading.clone();
    tokio::time::timeout(Duration::from_secs(10), b_leading.wait_for(|l| *l))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep_until(hung_at + Duration::from_millis(4500)).await;
    server.clear_faults();

    eventually("every pod bound", || {
        (0..10).all(|i| node_of(&server, &format!("p{i}")).is_some())
    })
    .await;
    for i in 0..10 {
        assert_eq!(bindings(&server, &format!("p{i}")), 1, "p{i}");
    }
    // replica-a ends as a process would: it lost the lease.
    let a_end = tokio::time::timeout(Duration::from_secs(5), a.task)
        .await
        .unwrap()
        .unwrap();
    assert!(a_end.is_err(), "replica-a must end with LostLease");
    b.shutdown().await.unwrap();
    let (both, changes) = monitor.await.unwrap();
    assert!(!both, "two replicas led at once: {changes:?}");
    assert_eq!(changes[..2], ["a stops", "b"], "{changes:?}");
}

/// Seen on a real cluster (tests/e2e: the leader deleted while pods arrived): a binding
/// the old leader had sent landed after its loop had stopped and its lease was released,
/// so the pod ran without its `Scheduled` event, and a replica that had given its lease up
/// was still writing. At shutdown the bindings under way now finish and are reported, and
/// only then is the lease released: nothing of the old leader's is written after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_shutdown_bindings_under_way_finish_and_are_reported_before_the_lease_goes() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "64"));
    let a = start(&server, "replica-a", true);
    let mut leading = a.leading.clone();
    tokio::time::timeout(Duration::from_secs(5), leading.wait_for(|l| *l))
        .await
        .unwrap()
        .unwrap();
    // Each binding is served a second after it arrives.
    server.inject(multiarch_fake_apiserver::Fault::new(
        Some(multiarch_fake_apiserver::Method::POST),
        "/binding",
        multiarch_fake_apiserver::Effect::Delay(Duration::from_secs(1)),
    ));
    let pods = ["p0", "p1", "p2"];
    for name in pods {
        server.apply("pods", pod(name, "arm:1", "100m"));
    }
    eventually("every binding sent", || {
        pods.iter().all(|p| bindings(&server, p) == 1)
    })
    .await;

    a.shutdown().await.unwrap();
    let lease = server
        .get(
            "coordination.k8s.io/leases",
            "multiarch",
            "multiarch-scheduler",
        )
        .unwrap();
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
    let version = |object: &serde_json::Value| -> u64 {
        object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let released = version(&lease);
    for name in pods {
        let bound = server.get("pods", "shop", name).unwrap();
        assert_eq!(bound["spec"]["nodeName"], "arm-1", "{name}");
        assert!(
            version(&bound) < released,
            "{name} was bound after the lease was released"
        );
        let events = events_for(&server, name);
        assert_eq!(events.len(), 1, "{name}: {events:?}");
        assert_eq!(events[0]["reason"], "Scheduled");
        assert!(
            version(&events[0]) < released,
            "{name}'s event was written after the lease was released"
        );
    }
}

/// Bindings decided ahead of the API server wait in the binder's queue: a pod deleted
/// while its binding waits there is never posted, and the others are bound once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_its_binding_waits_is_never_posted() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "64"));
    // The binder's 4 workers (bind_concurrency in the tests) each hold a hung binding.
    server.inject(multiarch_fake_apiserver::Fault::new(
        Some(multiarch_fake_apiserver::Method::POST),
        "/binding",
        multiarch_fake_apiserver::Effect::Hang,
    ));
    let metrics = multiarch_scheduler::in_cluster::metrics::SchedulerMetrics::default();
    let runtime = common::start_with_metrics(&server, common::options("a", false), metrics.clone());
    let assumed = move || {
        metrics
            .cache_size
            .get_or_create(&multiarch_scheduler::in_cluster::metrics::TypeLabel {
                r#type: "assumed_pods",
            })
            .get()
    };
    let names: Vec<String> = (0..10).map(|i| format!("p{i}")).collect();
    for name in &names {
        server.apply("pods", pod(name, "arm:1", "100m"));
    }
    let posted = |server: &FakeApiServer| -> Vec<String> {
        names
            .iter()
            .filter(|n| bindings(server, n) > 0)
            .cloned()
            .collect()
    };
    // All ten decided (assumed), four of them posted and hung.
    eventually("ten pods decided", || assumed() == 10).await;
    eventually("4 bindings under way", || posted(&server).len() == 4).await;
    let under_way = posted(&server);
    let waiting = names
        .iter()
        .find(|n| !under_way.contains(n))
        .unwrap()
        .clone();
    server.delete("pods", "shop", &waiting);
    // The loop has handled the delete (and cancelled the queued binding with it).
    eventually("the deleted pod forgotten", || assumed() == 9).await;
    server.clear_faults();
    eventually("every other pod bound", || {
        names
            .iter()
            .filter(|n| **n != waiting)
            .all(|n| node_of(&server, n).is_some())
    })
    .await;
    assert_eq!(bindings(&server, &waiting), 0, "{waiting} was posted");
    for name in names.iter().filter(|n| **n != waiting) {
        assert_eq!(bindings(&server, name), 1, "{name}");
    }
    runtime.shutdown().await.unwrap();
}

/// A `PodScheduled=False` decided about one pod never lands on another pod that took its
/// name meanwhile: the status patch carries the pod's UID, which the API server refuses
/// to change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_patch_for_a_pod_never_lands_on_its_re_created_namesake() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "8"));
    server.inject(multiarch_fake_apiserver::Fault::new(
        Some(multiarch_fake_apiserver::Method::PATCH),
        "/namespaces/shop/pods/web/status",
        multiarch_fake_apiserver::Effect::Hang,
    ));
    let runtime = start(&server, "a", false);
    // No amd64 node: unschedulable, and the condition's patch is held by the server.
    let first = server.apply("pods", pod("web", "amd:1", "100m"));
    eventually("web's status patch sent", || {
        server
            .requests()
            .iter()
            .any(|r| r == "PATCH /api/v1/namespaces/shop/pods/web/status")
    })
    .await;
    // Meanwhile the pod is deleted and another one is created with its name.
    server.delete("pods", "shop", "web");
    let mut namesake = pod("web", "multi:1", "100m");
    namesake["spec"]["schedulerName"] = json!("default-scheduler");
    let second = server.apply("pods", namesake);
    assert_ne!(first["metadata"]["uid"], second["metadata"]["uid"]);
    server.clear_faults();
    // The writer is sequential: once a later pod's report is written, web's patch has
    // been answered.
    server.apply("pods", pod("later", "amd:1", "100m"));
    eventually("later's FailedScheduling", || {
        !events_for(&server, "later").is_empty()
    })
    .await;
    let web = server.get("pods", "shop", "web").unwrap();
    assert_eq!(web["metadata"]["uid"], second["metadata"]["uid"]);
    assert!(
        web["status"]["conditions"].is_null(),
        "the first pod's condition landed on its namesake: {web}"
    );
    runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_is_hot_reloaded() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("amd-1", "amd64", "64"));
    server.apply("nodes", node("arm-1", "arm64", "64"));
    let prefer = |arch: &str| {
        json!({"metadata": {"name": "cluster"}, "spec": {
        "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": arch, "weight": 100}]}},
        "placement": {"scoring": [{"name": "ImageArchitecture", "weight": 20}]}}})
    };
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        prefer("arm64"),
    );
    let runtime = start(&server, "a", false);
    server.apply("pods", pod("first", "multi:1", "100m"));
    eventually("first bound", || node_of(&server, "first").is_some()).await;
    assert_eq!(node_of(&server, "first").as_deref(), Some("arm-1"));
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        prefer("amd64"),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.apply("pods", pod("second", "multi:1", "100m"));
    eventually("second bound", || node_of(&server, "second").is_some()).await;
    assert_eq!(node_of(&server, "second").as_deref(), Some("amd-1"));
    runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_watch_relists_after_410_gone() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "64"));
    let runtime = start(&server, "a", false);
    let mut ready = runtime.ready.clone();
    tokio::time::timeout(Duration::from_secs(10), ready.wait_for(|r| *r))
        .await
        .unwrap()
        .unwrap();
    // A partition: the watches drop and cannot reconnect while a node appears, another
    // goes, and history is compacted past what they saw.
    server.hold_watches(true);
    server.break_watches();
    server.apply("nodes", node("arm-2", "arm64", "64"));
    server.delete("nodes", "", "arm-1");
    server.compact();
    let lists = |server: &FakeApiServer| {
        server
            .requests_with_query()
            .iter()
            .filter(|r| r.starts_with("GET /api/v1/nodes") && !r.contains("watch=true"))
            .count()
    };
    let before = lists(&server);
    server.hold_watches(false);
    // The resumed watch gets 410 Gone and relists: a list after the compaction.
    eventually("the nodes relisted", || lists(&server) > before).await;
    // The new node is known: a pod pinned to it is bound there.
    let mut pinned = pod("pinned-new", "arm:1", "100m");
    pinned["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "arm-2"});
    server.apply("pods", pinned);
    eventually("pinned-new bound", || {
        node_of(&server, "pinned-new").as_deref() == Some("arm-2")
    })
    .await;
    // The deleted node is gone: a pod pinned to it sees one node only.
    let mut stale = pod("pinned-old", "arm:1", "100m");
    stale["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "arm-1"});
    server.apply("pods", stale);
    eventually("pinned-old reported against the relisted cluster", || {
        server.get("pods", "shop", "pinned-old").unwrap()["status"]["conditions"][0]["message"]
            == "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. no \
                new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not \
                helpful for scheduling."
    })
    .await;
    assert!(node_of(&server, "pinned-old").is_none());
    // One relist for the one 410, not a relist per reconnect.
    assert_eq!(
        lists(&server),
        before + 1,
        "{:?}",
        server.requests_with_query()
    );
    runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_verbosity_follows_the_cluster_config() {
    let server = FakeApiServer::start().await;
    let runtime = start(&server, "a", false);
    let mut verbosity = runtime.log_verbosity.clone();
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"}, "spec": {"logVerbosity": "Debug"}}),
    );
    tokio::time::timeout(
        Duration::from_secs(10),
        verbosity.wait_for(|v| *v == multiarch_crd::LogVerbosity::Debug),
    )
    .await
    .unwrap()
    .unwrap();
    runtime.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_pod_writes_respect_the_client_qps() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "64"));
    for i in 0..5 {
        server.apply("pods", pod(&format!("q{i}"), "arm:1", "100m"));
    }
    let mut limited = options("a", false);
    limited.api_qps = 10.0;
    limited.api_burst = 1;
    let started = std::time::Instant::now();
    let runtime = start_with(&server, limited);
    eventually("all bound", || {
        (0..5).all(|i| node_of(&server, &format!("q{i}")).is_some())
    })
    .await;
    eventually("all events written", || {
        (0..5).all(|i| !events_for(&server, &format!("q{i}")).is_empty())
    })
    .await;
    // 10 writes (5 bindings, 5 events) at 10/s with a burst of 1 take at least 0.9 s.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    runtime.shutdown().await.unwrap();
}

/// Quantities as the API server stores them (recorded from kube-apiserver 1.36.2: leading
/// zeros kept, more digits than an i64 holds, `n` suffixes) count: a bound pod's request
/// written that way fills its node, it is never hidden from the scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_every_stored_form_count() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "4"));
    server.apply("nodes", node("arm-2", "arm64", "4"));
    server.apply("nodes", node("arm-3", "arm64", "4"));
    let bound = |name: &str, node: &str, cpu: &str| {
        let mut hog = pod(name, "arm:1", cpu);
        hog["spec"]["schedulerName"] = json!("default-scheduler");
        hog["spec"]["nodeName"] = json!(node);
        hog
    };
    // 4 cores, 22 digits: more than the 18 this scheduler once read.
    server.apply("pods", bound("zeros", "arm-1", "0000000000000000000004"));
    // Far more than any node: 1.2e16 cores.
    server.apply("pods", bound("huge", "arm-2", "12345678901234567890m"));
    // 3.5 cores in nanocores.
    server.apply("pods", bound("nanos", "arm-3", "3500000000n"));
    let runtime = start(&server, "a", false);
    server.apply("pods", pod("half", "arm:1", "500000000n"));
    server.apply("pods", pod("one", "arm:1", "1"));
    eventually("half bound", || node_of(&server, "half").is_some()).await;
    assert_eq!(node_of(&server, "half").as_deref(), Some("arm-3"));
    eventually("FailedScheduling for one", || {
        events_for(&server, "one")
            .iter()
            .any(|e| e["reason"] == "FailedScheduling")
    })
    .await;
    let note = events_for(&server, "one")[0]["note"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        note.starts_with("0/3 nodes are available: 3 Insufficient cpu."),
        "{note}"
    );
    assert_eq!(node_of(&server, "one"), None);
    runtime.shutdown().await.unwrap();
}

/// A bound pod whose requests cannot be read is never taken for absent: its node counts
/// as full while it runs there, and the pod says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_with_an_unreadable_request_fills_its_node() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "64"));
    server.apply("nodes", node("arm-2", "arm64", "2"));
    let mut odd = pod("odd", "arm:1", "lots");
    odd["spec"]["schedulerName"] = json!("default-scheduler");
    odd["spec"]["nodeName"] = json!("arm-1");
    server.apply("pods", odd);
    let runtime = start(&server, "a", false);
    // arm-1 has far more room, and would be chosen if odd counted for nothing.
    for name in ["w1", "w2"] {
        server.apply("pods", pod(name, "arm:1", "500m"));
    }
    eventually("w1 and w2 bound", || {
        node_of(&server, "w1").is_some() && node_of(&server, "w2").is_some()
    })
    .await;
    assert_eq!(node_of(&server, "w1").as_deref(), Some("arm-2"));
    assert_eq!(node_of(&server, "w2").as_deref(), Some("arm-2"));
    eventually("odd told", || !events_for(&server, "odd").is_empty()).await;
    let event = &events_for(&server, "odd")[0];
    assert_eq!(event["reason"], "UnreadableResourceRequest");
    assert_eq!(event["type"], "Warning");
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains("lots") && note.contains("counts node arm-1 as full"),
        "{note}"
    );
    runtime.shutdown().await.unwrap();
}

/// A pod whose requests the scheduler cannot read is not dropped silently: it is told
/// why, and the rest of the cluster is scheduled as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_an_unreadable_request_is_told_why() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("arm-1", "arm64", "4"));
    server.apply("pods", pod("odd", "arm:1", "lots"));
    server.apply("pods", pod("fine", "arm:1", "1"));
    let runtime = start(&server, "a", false);
    eventually("fine bound", || node_of(&server, "fine").is_some()).await;
    eventually("FailedScheduling for odd", || {
        events_for(&server, "odd")
            .iter()
            .any(|e| e["reason"] == "FailedScheduling")
    })
    .await;
    let events = events_for(&server, "odd");
    let note = events[0]["note"].as_str().unwrap();
    assert!(
        note.starts_with("pod has an unreadable resource request: ") && note.contains("lots"),
        "{note}"
    );
    assert_eq!(events[0]["type"], "Warning");
    assert_eq!(node_of(&server, "odd"), None);
    runtime.shutdown().await.unwrap();
}

/// ImageLocality against the API server's objects: of three equal nodes, the one whose
/// `status.images` reports the pod's image (800 MB) gets the pods, as kube-scheduler's
/// default profile would place them; a node that stops reporting it no longer does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_go_where_their_image_already_is() {
    let server = FakeApiServer::start().await;
    for name in ["amd-1", "amd-2", "amd-3"] {
        let mut node = node(name, "amd64", "8");
        if name == "amd-2" {
            node["status"]["images"] = json!([
                {"names": ["amd:1", "registry.example/amd@sha256:00"], "sizeBytes": 800 * 1024 * 1024},
            ]);
        }
        server.apply("nodes", node);
    }
    let runtime = start(&server, "a", false);
    for name in ["w1", "w2", "w3"] {
        server.apply("pods", pod(name, "amd:1", "100m"));
        eventually("bound", || node_of(&server, name).is_some()).await;
        assert_eq!(node_of(&server, name).as_deref(), Some("amd-2"), "{name}");
    }
    // amd-2 reports other images now and amd-3 the pod's: the next pod goes to amd-3.
    // (The node and pod watches are separate streams, so the updates are made while no
    // scheduler runs: the next one starts from them. How an update moves the counts is
    // the cluster model's test.)
    runtime.shutdown().await.unwrap();
    let mut amd2 = server.get("nodes", "", "amd-2").unwrap();
    amd2["status"]["images"] = json!([{"names": ["other:1"], "sizeBytes": 800 * 1024 * 1024}]);
    server.apply("nodes", amd2);
    let mut amd3 = server.get("nodes", "", "amd-3").unwrap();
    amd3["status"]["images"] = json!([{"names": ["amd:1"], "sizeBytes": 800 * 1024 * 1024}]);
    server.apply("nodes", amd3);
    let runtime = start(&server, "a", false);
    server.apply("pods", pod("w4", "amd:1", "100m"));
    eventually("w4 bound", || node_of(&server, "w4").is_some()).await;
    assert_eq!(node_of(&server, "w4").as_deref(), Some("amd-3"));
    runtime.shutdown().await.unwrap();
}
