//! The shared runtime against the fake API server: leader election as the roles use it,
//! and the placement configuration they read.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use multiarch_fake_apiserver::FakeApiServer;
use multiarch_runtime::{
    leader_election::{ElectionConfig, Leadership, LostLease},
    placement_config::{CATCH_UP, CurrentError, current_for, follow},
    supervisor::Supervisor,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

fn election(identity: &str) -> ElectionConfig {
    ElectionConfig {
        namespace: "multiarch".into(),
        lease_name: "multiarch-test".into(),
        identity: identity.into(),
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(700),
        retry_period: Duration::from_millis(100),
    }
}

fn held_by(server: &FakeApiServer, holder: &str) {
    server.apply(
        "coordination.k8s.io/leases",
        json!({"metadata": {"name": "multiarch-test", "namespace": "multiarch"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1,
                        "renewTime": format!("2026-11-22T00:00:00.{:06}Z", rand_micros()),
                        "leaseTransitions": 0}}),
    );
}

/// A renew time that differs each call, as a live holder's does.
fn rand_micros() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_micros()
}

fn holder(server: &FakeApiServer) -> Value {
    server
        .get("coordination.k8s.io/leases", "multiarch", "multiarch-test")
        .map_or(Value::Null, |lease| lease["spec"]["holderIdentity"].clone())
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_works_once_the_holder_stops_renewing_and_releases_on_shutdown() {
    let server = FakeApiServer::start().await;
    held_by(&server, "replica-a");
    let supervisor = Supervisor::new(CancellationToken::new());
    let tasks = supervisor.tasks();
    let leadership = Leadership::start(&client(&server), Some(election("replica-b")), &tasks);
    let working = Arc::new(AtomicBool::new(false));
    let shutdown = CancellationToken::new();
    let flag = working.clone();
    let role = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            leadership
                .run_while_leading(&shutdown, |stop| async move {
                    flag.store(true, Ordering::SeqCst);
                    stop.cancelled().await;
                    flag.store(false, Ordering::SeqCst);
                })
                .await
        }
    });
    let leaders = tasks.leaders().clone();
    assert_eq!(
        leaders.value("multiarch-test"),
        Some(0),
        "a standby's metric"
    );
    assert_eq!(leaders.value("another-lease"), None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !working.load(Ordering::SeqCst),
        "worked while replica-a held the lease"
    );
    eventually("replica-b leads", || working.load(Ordering::SeqCst)).await;
    assert_eq!(holder(&server), "replica-b");
    eventually("the metric says replica-b leads", || {
        leaders.value("multiarch-test") == Some(1)
    })
    .await;
    shutdown.cancel();
    role.await.unwrap().unwrap();
    assert!(!working.load(Ordering::SeqCst));
    eventually("the lease is released", || holder(&server).is_null()).await;
    eventually("the metric says it no longer leads", || {
        leaders.value("multiarch-test") == Some(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lease_stops_the_work_with_an_error() {
    let server = FakeApiServer::start().await;
    let supervisor = Supervisor::new(CancellationToken::new());
    let leadership = Leadership::start(
        &client(&server),
        Some(election("replica-a")),
        &supervisor.tasks(),
    );
    let stopped = Arc::new(AtomicBool::new(false));
    let wrote = Arc::new(AtomicBool::new(false));
    let (stop_flag, write_flag) = (stopped.clone(), wrote.clone());
    let shutdown = CancellationToken::new();
    let role = tokio::spawn(async move {
        leadership
            .run_while_leading(&shutdown, |stop| async move {
                stop.cancelled().await;
                stop_flag.store(true, Ordering::SeqCst);
                // A pass that finishes its writes after being told to stop: its next
                // wait is where it is dropped.
                tokio::time::sleep(Duration::from_secs(3600)).await;
                write_flag.store(true, Ordering::SeqCst);
            })
            .await
    });
    eventually("replica-a leads", || holder(&server) == "replica-a").await;
    // Someone else takes the lease over and keeps renewing it.
    let result = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            held_by(&server, "replica-z");
            if role.is_finished() {
                return role.await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the loss was never noticed, or the role waited for its work");
    assert!(matches!(result, Err(LostLease)), "{result:?}");
    assert!(stopped.load(Ordering::SeqCst), "the work was told to stop");
    assert!(
        !wrote.load(Ordering::SeqCst),
        "the work wrote after losing the lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_is_read_and_followed() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let supervisor = Supervisor::new(CancellationToken::new());
    let mut configs = follow(&client, &supervisor.tasks());
    configs.wait_for(|c| c.synced).await.unwrap();
    assert!(configs.borrow().cluster.is_none());
    assert!(configs.borrow().pod_configs.is_empty());

    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"}, "spec": {"logVerbosity": "Debug"}}),
    );
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"priority": 1,
            "plugins": {"nodeAffinityScoring": {"enabled": true,
                "platforms": [{"architecture": "arm64", "weight": 10}]}}}}),
    );
    configs
        .wait_for(|c| c.cluster.is_some() && c.pod_configs.len() == 1)
        .await
        .unwrap();
    assert_eq!(
        configs.borrow().cluster_or_default().log_verbosity,
        multiarch_crd::LogVerbosity::Debug
    );

    let now = current_for(&client, "shop", &configs, CATCH_UP)
        .await
        .unwrap();
    assert!(now.cluster.is_some());
    assert_eq!(now.pod_configs.of("shop").len(), 1);
    assert!(
        current_for(&client, "other", &configs, CATCH_UP)
            .await
            .unwrap()
            .pod_configs
            .of("other")
            .is_empty()
    );

    server.delete("multiarch.openshift.io/podplacementconfigs", "shop", "web");
    server.delete(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "",
        "cluster",
    );
    configs
        .wait_for(|c| c.cluster.is_none() && c.pod_configs.is_empty())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_behind_the_api_server_is_never_taken_for_the_current_configuration() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let supervisor = Supervisor::new(CancellationToken::new());
    let configs = follow(&client, &supervisor.tasks());
    let (_tx, never) = tokio::sync::watch::channel(std::sync::Arc::default());
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {"priority": 1, "plugins": {}}}),
    );
    // A snapshot never synced is behind, however long it is waited for.
    let waited = std::time::Duration::from_millis(50);
    let behind = current_for(&client, "shop", &never, waited).await;
    assert!(
        matches!(&behind, Err(CurrentError::Behind { namespace, .. }) if namespace == "shop"),
        "{behind:?}"
    );
    let caught_up = current_for(&client, "shop", &configs, CATCH_UP)
        .await
        .unwrap();
    assert_eq!(caught_up.pod_configs.of("shop").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_config_is_the_same_copy_in_every_snapshot() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let supervisor = Supervisor::new(CancellationToken::new());
    let mut configs = follow(&client, &supervisor.tasks());
    let rules = |name: &str, arch: &str| {
        json!({"metadata": {"name": name, "namespace": name}, "spec": {"priority": 1, "plugins": {
            "celArchitecturePlacement": {"enabled": true, "fallbackArchitectures": [arch], "rules": []}}}})
    };
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        rules("a", "arm64"),
    );
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        rules("b", "s390x"),
    );
    let first = configs
        .wait_for(|c| c.synced && c.architecture_rules.governs_namespace("b"))
        .await
        .unwrap()
        .clone();
    assert!(first.architecture_rules.governs_namespace("a"));
    // Another namespace's config changes: "a"'s config is the same copy, its rules
    // are not compiled again.
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        rules("b", "ppc64le"),
    );
    let second = configs
        .wait_for(|c| {
            c.pod_configs.of("b").first().is_some_and(|b| {
                b.spec
                    .plugins
                    .cel_architecture_placement
                    .as_ref()
                    .is_some_and(|p| p.fallback_names() == ["ppc64le"])
            })
        })
        .await
        .unwrap()
        .clone();
    assert!(std::sync::Arc::ptr_eq(
        &first.pod_configs.of("a")[0],
        &second.pod_configs.of("a")[0]
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_election_the_work_runs_until_shutdown() {
    let server = FakeApiServer::start().await;
    let supervisor = Supervisor::new(CancellationToken::new());
    let leadership = Leadership::start(&client(&server), None, &supervisor.tasks());
    assert!(leadership.is_leading());
    let shutdown = CancellationToken::new();
    let working = Arc::new(AtomicBool::new(false));
    let flag = working.clone();
    let role = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            leadership
                .run_while_leading(&shutdown, |stop| async move {
                    flag.store(true, Ordering::SeqCst);
                    stop.cancelled().await;
                })
                .await
        }
    });
    eventually("the work runs", || working.load(Ordering::SeqCst)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!role.is_finished(), "the work stopped without a shutdown");
    shutdown.cancel();
    role.await.unwrap().unwrap();
    assert!(
        server.list("coordination.k8s.io/leases").is_empty(),
        "no lease without an election"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_request_fails_at_its_deadline_and_watches_are_not_cut() {
    use futures_util::StreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use multiarch_fake_apiserver::{Effect, Fault, Method};

    let server = FakeApiServer::start().await;
    let client = multiarch_runtime::client::with_request_deadline(
        kube::Config::new(server.url().parse().unwrap()),
        Duration::from_millis(300),
    )
    .unwrap();
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, "multiarch");
    server.inject(Fault::new(
        Some(Method::GET),
        "/configmaps/settings",
        Effect::Hang,
    ));
    let answer = tokio::time::timeout(Duration::from_secs(10), api.get_opt("settings"))
        .await
        .expect("the request hung past its deadline");
    let error = answer.unwrap_err().to_string();
    assert!(
        error.contains(
            "the API server did not answer GET /api/v1/namespaces/multiarch/configmaps/settings within 300ms"
        ),
        "{error}"
    );
    server.clear_faults();
    assert!(api.get_opt("settings").await.unwrap().is_none());

    // A watch outlives the deadline and still sees changes.
    // Driven by its own task, so that the watch request is open while time passes.
    let (tx, mut events) = tokio::sync::mpsc::channel(16);
    let driver = tokio::spawn(async move {
        let mut stream =
            kube::runtime::watcher(api, kube::runtime::watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            if tx.send(event).await.is_err() {
                return;
            }
        }
    });
    while !matches!(
        events.recv().await,
        Some(Ok(kube::runtime::watcher::Event::InitDone))
    ) {}
    // Three deadlines pass with the watch open and nothing to say.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let watches_before = server
        .requests()
        .iter()
        .filter(|r| r.contains("configmaps") && r.starts_with("GET"))
        .count();
    server.apply(
        "configmaps",
        json!({"metadata": {"name": "settings", "namespace": "multiarch"}, "data": {"a": "b"}}),
    );
    let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .unwrap();
    let seen = match event {
        Some(Ok(kube::runtime::watcher::Event::Apply(cm))) => cm.metadata.name,
        other => panic!("the watch was interrupted: {other:?}"),
    };
    driver.abort();
    // No new request: the event came on the watch opened before the pause.
    let watches_after = server
        .requests()
        .iter()
        .filter(|r| r.contains("configmaps") && r.starts_with("GET"))
        .count();
    assert_eq!(watches_before, watches_after);
    assert_eq!(seen.as_deref(), Some("settings"));
}
