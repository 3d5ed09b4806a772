//! A leadership change with a backlog: 3,000 pending pods for nodes that fit 2,500, the
//! leader's bindings slowed so that many are under way when it stops (SIGTERM) or loses
//! its lease. Whatever the handover, the old leader writes nothing once the new one has
//! written, no node takes more than its allocatable and every pod that fits is bound.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{node, options, start_with};
use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault, Method};
use multiarch_runtime::leader_election::ElectionConfig;
use multiarch_scheduler::in_cluster::RunningScheduler;
use serde_json::json;

const NODES: usize = 25;
/// Millicores per node, and per pod: 100 pods fit a node.
const NODE_CPU: u64 = 4000;
const POD_CPU: u64 = 40;
const PODS: usize = 3000;
const FIT: usize = NODES * (NODE_CPU / POD_CPU) as usize;

fn backlog(server: &FakeApiServer) {
    for n in 0..NODES {
        server.apply("nodes", node(&format!("n{n:02}"), "arm64", "4"));
    }
    for p in 0..PODS {
        server.apply(
            "pods",
            json!({"metadata": {"name": format!("p{p:04}"), "namespace": "shop"},
                   "spec": {"schedulerName": "multiarch-scheduler", "containers": [{"name": "app", "image": "arm:1",
                            "resources": {"requests": {"cpu": format!("{POD_CPU}m")}}}]},
                   "status": {"phase": "Pending"}}),
        );
    }
    // Each binding is served 5 ms after it arrives: the leader always has some under way.
    server.inject(Fault::new(
        Some(Method::POST),
        "/binding",
        Effect::Delay(Duration::from_millis(5)),
    ));
}

fn bound(server: &FakeApiServer) -> usize {
    server
        .list("pods")
        .iter()
        .filter(|p| p["spec"]["nodeName"].is_string())
        .count()
}

/// What the handover must keep, read from the API server's own record.
fn assert_one_writer_at_a_time_and_no_overcommit(server: &FakeApiServer) {
    let commits = server.commits();
    let by = |who: &str| {
        commits
            .iter()
            .filter(|c| c.writer.as_deref() == Some(who))
            .map(|c| c.resource_version)
            .collect::<Vec<_>>()
    };
    let (old, new) = (by("replica-a"), by("replica-b"));
    assert!(!old.is_empty() && !new.is_empty(), "both replicas wrote");
    let old_last = old.iter().max().unwrap();
    let new_first = new.iter().min().unwrap();
    assert!(
        old_last < new_first,
        "replica-a wrote at resourceVersion {old_last}, after replica-b's first write at {new_first}: {:?}",
        commits
            .iter()
            .filter(|c| c.resource_version >= *new_first
                && c.writer.as_deref() == Some("replica-a"))
            .collect::<Vec<_>>()
    );
    // Pods are only added to nodes here (none is deleted), so a node within its
    // allocatable at the end was within it at every moment.
    let mut used: BTreeMap<String, u64> = BTreeMap::new();
    for pod in server.list("pods") {
        if let Some(node) = pod["spec"]["nodeName"].as_str() {
            *used.entry(node.to_owned()).or_default() += POD_CPU;
        }
    }
    for (node, millis) in &used {
        assert!(*millis <= NODE_CPU, "{node} holds {millis}m of {NODE_CPU}m");
    }
    // A binding of an already bound pod is refused by the server; every pod that fits
    // is bound, and no more.
    assert_eq!(used.values().sum::<u64>(), FIT as u64 * POD_CPU);
}

/// How long the waits here may take: 3,000 pods on a busy machine (a full CI beside
/// it) take far longer than alone; a deadline only ends a test that hangs.
const PATIENCE: Duration = Duration::from_secs(120);

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A replica whose lease outlasts a busy machine's stalls (the shared tests' 1.5 s lease
/// and 1 s renew deadline are lost when the leader's renewals wait behind 3,000 pods'
/// work on a loaded machine, which these tests must not read as a handover).
fn replica(server: &FakeApiServer, identity: &str) -> RunningScheduler {
    let mut options = options(identity, true);
    options.election = Some(ElectionConfig {
        namespace: "multiarch".into(),
        lease_name: "multiarch-scheduler".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(8),
        renew_deadline: Duration::from_secs(6),
        retry_period: Duration::from_millis(300),
    });
    start_with(server, options)
}

/// Waits for replica-b to take the released lease at its next try. replica-a decides
/// pods faster than it binds them and finishes every binding under way at shutdown, so
/// it may have bound the whole backlog by then: this waits for the lease (replica-b's
/// first write) rather than reading the moment the last pod is bound.
async fn successor_leads(b: &RunningScheduler) {
    let mut b_leading = b.leading.clone();
    tokio::time::timeout(PATIENCE, b_leading.wait_for(|l| *l))
        .await
        .expect("replica-b took over")
        .unwrap();
}

/// The backlog, replica-a leading and replica-b its standby, a tenth of the pods bound.
async fn mid_backlog() -> (FakeApiServer, RunningScheduler, RunningScheduler) {
    let server = FakeApiServer::start().await;
    backlog(&server);
    let a = replica(&server, "replica-a");
    let mut a_leading = a.leading.clone();
    tokio::time::timeout(PATIENCE, a_leading.wait_for(|l| *l))
        .await
        .expect("replica-a leads")
        .unwrap();
    let b = replica(&server, "replica-b");
    eventually("a tenth of the backlog bound", || {
        bound(&server) >= PODS / 10
    })
    .await;
    (server, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_stopped_with_a_backlog_finishes_its_writes_before_its_successor_starts() {
    let (server, a, b) = mid_backlog().await;
    a.shutdown().await.unwrap();
    successor_leads(&b).await;
    eventually("every pod that fits bound", || bound(&server) == FIT).await;
    b.shutdown().await.unwrap();
    assert_one_writer_at_a_time_and_no_overcommit(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_that_loses_its_lease_with_a_backlog_writes_nothing_more() {
    let (server, a, b) = mid_backlog().await;
    // replica-a's next renewal hangs: it stops leading at its renew deadline while its
    // bindings are under way, and replica-b takes over once the lease expires.
    server.inject(
        Fault::new(
            Some(Method::PUT),
            "/leases/multiarch-scheduler",
            Effect::Hang,
        )
        .times(1),
    );
    let a_end = tokio::time::timeout(PATIENCE, a.task)
        .await
        .unwrap()
        .unwrap();
    assert!(a_end.is_err(), "replica-a must end with LostLease");
    let mut b_leading = b.leading.clone();
    tokio::time::timeout(PATIENCE, b_leading.wait_for(|l| *l))
        .await
        .unwrap()
        .unwrap();
    // The hung renewal is answered now: too late (the lease moved on), refused.
    server.clear_faults();
    eventually("every pod that fits bound", || bound(&server) == FIT).await;
    b.shutdown().await.unwrap();
    assert_one_writer_at_a_time_and_no_overcommit(&server);
}

/// Events slower than the backlog (a busy API server): at SIGTERM the leader cannot
/// write every report in its shutdown budget, so it drops the rest before releasing the
/// lease rather than writing them after its successor has started (kube-apiserver 1.36.2
/// at 20 QPS showed it: the old leader's writer went on past the release).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_stopped_with_reports_queued_drops_them_before_its_successor_starts() {
    let (server, a, b) = mid_backlog().await;
    server.inject(Fault::new(
        Some(Method::POST),
        "/events",
        Effect::Delay(Duration::from_millis(20)),
    ));
    a.shutdown().await.unwrap();
    server.clear_faults();
    successor_leads(&b).await;
    eventually("every pod that fits bound", || bound(&server) == FIT).await;
    b.shutdown().await.unwrap();
    assert_one_writer_at_a_time_and_no_overcommit(&server);
}
