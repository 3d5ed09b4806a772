//! A tenant's pull-secret lists cost the inspector a bounded number of reads and bytes:
//! a pod naming 10,000 pull secrets is refused, naming the limit, without one Secret
//! read; fifty pods of one workload asking at once share one read of their keyring; a
//! Secret holding a megabyte of docker config is refused without being kept; and a
//! tenant's reads are paced on their own, so another namespace's keyring is read at
//! at once while the tenant's wait their turn.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{sync::Arc, time::Duration};

use base64::Engine;
use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault, Method};
use multiarch_inspector::{
    ImageInspector, InspectError, InspectRequest, Inspector,
    cache::CacheOptions,
    metrics::{InspectionResultLabel, InspectorMetrics},
    registry::RegistryOptions,
    secrets::{KubeSecrets, MAX_SECRET_CONFIG_BYTES, SecretSource},
    settings::RegistrySettings,
};
use multiarch_policy::pod_images::MAX_PULL_SECRETS;
use multiarch_runtime::supervisor::Supervisor;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn pull_secret(namespace: &str, name: &str, config_bytes: usize) -> serde_json::Value {
    let auth = base64::engine::general_purpose::STANDARD.encode("user:password");
    let mut auths = serde_json::Map::new();
    auths.insert("registry.example".into(), json!({"auth": auth}));
    // Each entry is about 50 bytes of JSON.
    for i in 0..config_bytes / 50 {
        auths.insert(format!("r{i}.example"), json!({"auth": auth}));
    }
    let config = json!({ "auths": auths }).to_string();
    json!({
        "metadata": {"name": name, "namespace": namespace},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)},
    })
}

async fn source(server: &FakeApiServer, supervisor: &Supervisor) -> Arc<KubeSecrets> {
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let secrets = Arc::new(KubeSecrets::start(client, &supervisor.tasks()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !secrets.caching() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch never came up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    secrets
}

fn secret_reads(server: &FakeApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.contains("/secrets/"))
        .count()
}

/// A pod naming 10,000 pull secrets, and one whose service account names the rest, are
/// refused before any Secret is read; through the inspector the refusal is counted.
async fn too_many_names_are_refused_before_any_read(
    server: &FakeApiServer,
    secrets: &Arc<KubeSecrets>,
) {
    // 10,000 names (the model keeps 101 of them): refused before any read.
    let names: Vec<String> = (0..=MAX_PULL_SECRETS).map(|i| format!("s{i}")).collect();
    let refused = secrets.keyring("tenant", &names, None).await.unwrap_err();
    assert!(
        matches!(&refused, InspectError::PullSecretsOverLimit { .. }),
        "{refused:?}"
    );
    assert!(
        refused
            .to_string()
            .contains("more than 100 distinct imagePullSecrets"),
        "{refused}"
    );
    assert!(!refused.is_transient(), "a limit, not a failure to retry");
    assert_eq!(secret_reads(server), 0);
    // Through the inspector, the refusal is counted.
    let metrics = InspectorMetrics::default();
    let inspector = Inspector::new(
        RegistrySettings::default(),
        RegistryOptions::default(),
        CacheOptions::default(),
        secrets.clone(),
        metrics.clone(),
    );
    let request = InspectRequest {
        image: "registry.example/app:1".into(),
        namespace: "tenant".into(),
        pull_secrets: names.clone(),
        ..InspectRequest::default()
    };
    assert!(inspector.inspect(&request).await.is_err());
    let label = InspectionResultLabel {
        result: "pull_secrets_over_limit",
    };
    assert_eq!(metrics.credential_failures.get_or_create(&label).get(), 1);

    // A service account that names the rest counts with the pod's.
    server.apply(
        "serviceaccounts",
        json!({"metadata": {"name": "builder", "namespace": "tenant"},
            "imagePullSecrets": (0..200).map(|i| json!({"name": format!("sa{i}")})).collect::<Vec<_>>()}),
    );
    let refused = secrets
        .keyring("tenant", &["pull".to_owned()], Some("builder"))
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("the pod and its service account name more than 100"),
        "{refused}"
    );
    assert_eq!(secret_reads(server), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_pull_secrets_are_bounded_read_once_and_paced_per_namespace() {
    let server = FakeApiServer::start().await;
    let supervisor = Supervisor::new(CancellationToken::new());
    let secrets = source(&server, &supervisor).await;

    too_many_names_are_refused_before_any_read(&server, &secrets).await;

    // Fifty pods of one workload at once: one read of its two secrets.
    server.apply("secrets", pull_secret("shop", "a", 100));
    server.apply("secrets", pull_secret("shop", "b", 100));
    let pulls = vec!["a".to_owned(), "b".to_owned(), "a".to_owned()];
    // Each asks (polled once) while the Secret reads hang: no read can have been answered
    // before the last one asks, however busy the machine.
    server.inject(Fault::new(Some(Method::GET), "/secrets/", Effect::Hang));
    let mut asked: Vec<_> = (0..50)
        .map(|_| Box::pin(secrets.keyring("shop", &pulls, None)))
        .collect();
    for ask in &mut asked {
        assert!(futures_util::poll!(ask.as_mut()).is_pending());
    }
    server.clear_faults();
    for keyring in futures_util::future::join_all(asked).await {
        assert!(!keyring.unwrap().is_empty());
    }
    assert_eq!(
        secret_reads(&server),
        2,
        "fifty pods of one workload asking at once: one read of each of their secrets"
    );

    // A Secret of a megabyte of docker config: refused, naming the limit, never kept.
    server.apply("secrets", pull_secret("shop", "huge", 1024 * 1024));
    let refused = secrets
        .keyring("shop", &["huge".to_owned()], None)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains(&format!("more than the {MAX_SECRET_CONFIG_BYTES} read")),
        "{refused}"
    );
    assert!(
        secrets.cached_bytes() < 64 * 1024,
        "{} bytes of keyrings kept",
        secrets.cached_bytes()
    );

    // A tenant that has spent its namespace's burst of reads waits; another namespace's
    // keyring is read at once.
    for i in 0..300 {
        server.apply("secrets", pull_secret("tenant", &format!("t{i}"), 100));
    }
    let tenant = secrets.clone();
    let flood = tokio::spawn(async move {
        for chunk in 0..6 {
            let names: Vec<String> = (chunk * 50..chunk * 50 + 50)
                .map(|i| format!("t{i}"))
                .collect();
            tenant.keyring("tenant", &names, None).await.unwrap();
        }
    });
    // Wait until the tenant has had its burst of 100 reads.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while server
        .requests()
        .iter()
        .filter(|r| r.contains("/namespaces/tenant/secrets/"))
        .count()
        < 100
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the tenant never read"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    server.apply("secrets", pull_secret("bank", "pull", 100));
    secrets
        .keyring("bank", &["pull".to_owned()], None)
        .await
        .unwrap();
    // The tenant's other 200 reads take ten seconds at its pace: had the bank's read
    // waited behind them, the flood would be over.
    assert!(
        !flood.is_finished(),
        "another namespace's read waited for the tenant's"
    );
    flood.abort();
}
