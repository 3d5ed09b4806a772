//! Pull secrets follow the cluster: the inspector reads them through the (fake) API
//! server, by name only (no Secret list or watch), keeps a keyring while each of its
//! Secrets is at the version it was read at (checked by a metadata-only GET before each
//! use) and drops it when a ServiceAccount it was read from changes (watched), so that a
//! revoked credential opens no private image for the next pod. The images are on a real
//! registry (Debian's docker-registry, basic auth).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::registry;

use std::{sync::Arc, time::Duration};

use base64::Engine;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_inspector::{
    ImageInspector, InspectError, InspectRequest, Inspector, cache::CacheOptions,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::KubeSecrets,
    settings::RegistrySettings,
};
use multiarch_runtime::supervisor::Supervisor;
use registry::{Options, Registry, push_image};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn pull_secret(name: &str, registry: &str, password: &str) -> serde_json::Value {
    let auth =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{password}", registry::USER));
    let config = json!({"auths": {registry: {"auth": auth}}}).to_string();
    json!({
        "metadata": {"name": name, "namespace": "shop"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)},
    })
}

fn settings(reg: &Registry) -> RegistrySettings {
    let file = reg.dir().join("registries-watch.yaml");
    std::fs::write(&file, reg.settings_yaml()).unwrap();
    RegistrySettings::load(&file).unwrap()
}

async fn until(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A private registry holding `private:v1`, its pull secret named by the service account
/// `builder`, the Secret watches live, and an inspector reading through them.
struct Setup {
    reg: Registry,
    server: FakeApiServer,
    secrets: Arc<KubeSecrets>,
    inspector: Inspector,
    /// Runs the watches while the test runs.
    supervisor: Supervisor,
}

async fn setup() -> Setup {
    let reg = Registry::start(Options {
        basic_auth: true,
        ..Options::default()
    });
    push_image(&reg, "private", "linux", "arm64", None, false, Some("v1")).await;
    let server = FakeApiServer::start().await;
    server.apply(
        "secrets",
        pull_secret("pull", &reg.addr, registry::PASSWORD),
    );
    server.apply(
        "serviceaccounts",
        json!({"metadata": {"name": "builder", "namespace": "shop"},
               "imagePullSecrets": [{"name": "pull"}]}),
    );
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let supervisor = Supervisor::new(CancellationToken::new());
    let secrets = Arc::new(KubeSecrets::start(client, &supervisor.tasks()));
    until("the watches are live", || secrets.caching()).await;
    let inspector = Inspector::new(
        settings(&reg),
        RegistryOptions::default(),
        CacheOptions::default(),
        secrets.clone(),
        InspectorMetrics::default(),
    );
    Setup {
        reg,
        server,
        secrets,
        inspector,
        supervisor,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_pull_secret_opens_no_private_image_for_the_next_pod() {
    let Setup {
        reg,
        server,
        secrets,
        inspector,
        supervisor: _supervisor,
    } = setup().await;
    let image = format!("{}/private:v1", reg.addr);
    let pod = |service_account: Option<&str>, pull_secrets: &[&str]| InspectRequest {
        image: image.clone(),
        namespace: "shop".into(),
        pull_secrets: pull_secrets.iter().map(|s| (*s).to_owned()).collect(),
        service_account: service_account.map(str::to_owned),
        bypass_cache: false,
    };
    // Waits until the ServiceAccount watch has seen `change`.
    let after = |change: &dyn Fn()| {
        let seen = secrets.changes_seen();
        change();
        let secrets = secrets.clone();
        async move { until("the change is seen", || secrets.changes_seen() > seen).await }
    };

    // Through the service account, then kept: the next pods check the Secret's version
    // (metadata only) and read no Secret data, nor the service account.
    let info = inspector.inspect(&pod(Some("builder"), &[])).await.unwrap();
    assert_eq!(info.platform_list()[0].architecture, "arm64");
    let count = |server: &FakeApiServer, request: &str| {
        server.requests().iter().filter(|r| *r == request).count()
    };
    let data = "GET /api/v1/namespaces/shop/secrets/pull";
    let version = "GET /api/v1/namespaces/shop/secrets/pull (metadata)";
    let account = "GET /api/v1/namespaces/shop/serviceaccounts/builder";
    let before = (
        count(&server, data),
        count(&server, version),
        count(&server, account),
    );
    inspector.inspect(&pod(Some("builder"), &[])).await.unwrap();
    assert_eq!(
        (
            count(&server, data),
            count(&server, version),
            count(&server, account)
        ),
        (before.0, before.1 + 1, before.2),
        "the keyring was not kept"
    );
    // No Secret is ever listed or watched: the inspector's RBAC has `get` only.
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /api/v1/secrets")),
        "{:?}",
        server.requests()
    );

    // The service account no longer lists the secret.
    after(&|| {
        server.apply(
            "serviceaccounts",
            json!({"metadata": {"name": "builder", "namespace": "shop"}}),
        );
    })
    .await;
    let err = inspector
        .inspect(&pod(Some("builder"), &[]))
        .await
        .unwrap_err();
    assert!(matches!(err, InspectError::NoCredentials { .. }), "{err}");

    // The pod names the secret itself; then the secret's password changes: the next pod
    // is inspected with it, with no watch to wait for.
    inspector.inspect(&pod(None, &["pull"])).await.unwrap();
    server.apply("secrets", pull_secret("pull", &reg.addr, "revoked"));
    let err = inspector.inspect(&pod(None, &["pull"])).await.unwrap_err();
    assert!(
        matches!(err, InspectError::CredentialsRejected { .. }),
        "{err}"
    );

    // Restored, then deleted, then created again.
    server.apply(
        "secrets",
        pull_secret("pull", &reg.addr, registry::PASSWORD),
    );
    inspector.inspect(&pod(None, &["pull"])).await.unwrap();
    server.delete("secrets", "shop", "pull");
    let err = inspector.inspect(&pod(None, &["pull"])).await.unwrap_err();
    assert!(matches!(err, InspectError::NoCredentials { .. }), "{err}");
    server.apply(
        "secrets",
        pull_secret("pull", &reg.addr, registry::PASSWORD),
    );
    inspector.inspect(&pod(None, &["pull"])).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_live_watches_every_request_reads_the_secrets() {
    let server = FakeApiServer::start().await;
    server.apply("secrets", pull_secret("pull", "127.0.0.1:1", "x"));
    // The ServiceAccount watch cannot list: nothing is kept, every request reads.
    server.inject(multiarch_fake_apiserver::Fault::new(
        Some(multiarch_fake_apiserver::Method::GET),
        "/api/v1/serviceaccounts",
        multiarch_fake_apiserver::Effect::Status(500),
    ));
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let supervisor = Supervisor::new(CancellationToken::new());
    let secrets = KubeSecrets::start(client, &supervisor.tasks());
    use multiarch_inspector::secrets::SecretSource;
    for _ in 0..3 {
        secrets
            .keyring("shop", &["pull".to_owned()], None)
            .await
            .unwrap();
    }
    assert!(!secrets.caching());
    let reads = server
        .requests()
        .iter()
        .filter(|r| *r == "GET /api/v1/namespaces/shop/secrets/pull")
        .count();
    assert_eq!(reads, 3);
}
