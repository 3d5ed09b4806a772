//! The gRPC service and client (same trait, same answers, typed errors), and pull
//! secrets read from the Kubernetes API.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::registry;

use std::{convert::Infallible, sync::Arc, time::Duration};

use base64::Engine;
use multiarch_inspector::{
    ImageInspector, InspectError, InspectRequest, Inspector,
    cache::CacheOptions,
    grpc::{self, RemoteInspector, ServiceLimits},
    metrics::InspectorMetrics,
    registry::RegistryOptions,
    secrets::{KubeSecrets, SecretSource},
    settings::RegistrySettings,
};
use registry::{Options, Registry, platform, push_image, push_index};

fn settings_for(reg: &Registry) -> RegistrySettings {
    let path = reg.dir().join("settings.yaml");
    std::fs::write(&path, reg.settings_yaml()).unwrap();
    RegistrySettings::load(&path).unwrap()
}

/// A Kubernetes API that serves one namespace's Secrets and ServiceAccounts.
fn fake_api(objects: Vec<(&'static str, serde_json::Value)>) -> kube::Client {
    let objects = Arc::new(objects);
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let objects = objects.clone();
        async move {
            let path = request.uri().path().to_owned();
            let found = objects
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, body)| body.clone());
            let (status, body) = match found {
                Some(body) => (200, body),
                None => (
                    404,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
                ),
            };
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(service, "default")
}

fn pull_secret(name: &str, registry: &str, user: &str, password: &str) -> serde_json::Value {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = serde_json::json!({"auths": {registry: {"auth": auth}}}).to_string();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "shop"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)},
    })
}

#[tokio::test]
async fn the_inspector_reads_the_pods_and_service_accounts_pull_secrets() {
    let reg = Registry::start(Options {
        basic_auth: true,
        ..Options::default()
    });
    push_image(&reg, "private", "linux", "arm64", None, false, Some("v1")).await;
    let client = fake_api(vec![
        (
            "/api/v1/namespaces/shop/secrets/wrong",
            pull_secret("wrong", &reg.addr, registry::USER, "nope"),
        ),
        (
            "/api/v1/namespaces/shop/secrets/right",
            pull_secret("right", &reg.addr, registry::USER, registry::PASSWORD),
        ),
        (
            "/api/v1/namespaces/shop/serviceaccounts/builder",
            serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "builder", "namespace": "shop"},
                "imagePullSecrets": [{"name": "right"}]}),
        ),
    ]);
    // The canned API answers no watches: the secrets are read for every request.
    let supervisor =
        multiarch_runtime::supervisor::Supervisor::new(tokio_util::sync::CancellationToken::new());
    let secrets: Arc<dyn SecretSource> = Arc::new(KubeSecrets::start(client, &supervisor.tasks()));
    let inspector = Inspector::new(
        settings_for(&reg),
        RegistryOptions::default(),
        CacheOptions::default(),
        secrets.clone(),
        InspectorMetrics::default(),
    );
    let image = format!("{}/private:v1", reg.addr);
    let request = |secrets: &[&str], sa: Option<&str>| InspectRequest {
        image: image.clone(),
        namespace: "shop".into(),
        pull_secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
        service_account: sa.map(str::to_owned),
        bypass_cache: false,
    };

    // A missing secret is skipped (as the kubelet does); no credentials remain.
    let err = inspector
        .inspect(&request(&["missing"], None))
        .await
        .unwrap_err();
    assert!(matches!(err, InspectError::NoCredentials { .. }), "{err}");
    let err = inspector
        .inspect(&request(&["wrong"], None))
        .await
        .unwrap_err();
    assert!(
        matches!(err, InspectError::CredentialsRejected { .. }),
        "{err}"
    );
    // The service account's pull secret is used, after the pod's own (rejected) one.
    let info = inspector
        .inspect(&request(&["wrong"], Some("builder")))
        .await
        .unwrap();
    assert_eq!(info.platform_list()[0].architecture, "arm64");
}

#[tokio::test]
async fn grpc_client_gives_the_same_answers_and_typed_errors() {
    let reg = Registry::start(Options::default());
    let amd = push_image(&reg, "app", "linux", "amd64", None, false, None).await;
    let arm = push_image(&reg, "app", "linux", "arm", Some("v7"), false, None).await;
    push_index(
        &reg,
        "app",
        "v1",
        false,
        &[
            (amd, platform("linux", "amd64", None), None),
            (arm, platform("linux", "arm", Some("v7")), None),
        ],
    )
    .await;
    let local: Arc<dyn ImageInspector> = Arc::new(Inspector::new(
        settings_for(&reg),
        RegistryOptions::default(),
        CacheOptions::default(),
        Arc::new(multiarch_inspector::secrets::StaticKeyring::default()),
        InspectorMetrics::default(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(grpc::serve(
        listener,
        None,
        local.clone(),
        ServiceLimits::default(),
        tokio_util::sync::CancellationToken::new(),
    ));

    let remote = RemoteInspector::new(&format!("http://{addr}")).unwrap();
    let request = InspectRequest {
        image: format!("{}/app:v1", reg.addr),
        namespace: "ns".into(),
        ..InspectRequest::default()
    };
    let via_grpc = remote.inspect(&request).await.unwrap();
    let direct = local.inspect(&request).await.unwrap();
    assert_eq!(via_grpc, direct);
    assert_eq!(
        via_grpc
            .platform_list()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["amd64", "arm/v7"]
    );

    // An OLM bundle image's mark crosses the wire: remote callers confine nothing either.
    registry::push_image_with_files(
        &reg,
        "bundle",
        "v1",
        "amd64",
        registry::bundle_labels("app"),
        &[("manifests/csv.yaml", "kind: ClusterServiceVersion\n")],
    )
    .await;
    let bundle = InspectRequest {
        image: format!("{}/bundle:v1", reg.addr),
        ..request.clone()
    };
    let via_grpc = remote.inspect(&bundle).await.unwrap();
    assert!(via_grpc.operator_bundle);
    assert_eq!(via_grpc.placement_platforms(), None);
    assert_eq!(via_grpc, local.inspect(&bundle).await.unwrap());

    let missing = InspectRequest {
        image: format!("{}/none:v1", reg.addr),
        ..request.clone()
    };
    let err = remote.inspect(&missing).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "image {}/none:v1 not found: check the repository name and the tag or digest",
            reg.addr
        )
    );
    assert_eq!(err.metric_label(), "remote");
    assert!(!err.is_transient());

    // No server: a transient service error, not a panic.
    let nobody = RemoteInspector::new("http://127.0.0.1:1").unwrap();
    let err = nobody.inspect(&request).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
}

/// An inspector that accepts the connection and never answers: the call fails at its
/// deadline instead of holding the caller (the webhook, the scheduler) forever.
#[tokio::test]
async fn a_hung_inspector_is_an_error_at_the_deadline() {
    let addr = registry::silent_server().await;
    let remote =
        RemoteInspector::with_deadline(&format!("http://{addr}"), Duration::from_millis(300))
            .unwrap();
    let request = InspectRequest {
        image: "quay.io/any/image:1".into(),
        namespace: "ns".into(),
        ..InspectRequest::default()
    };
    let answer = tokio::time::timeout(Duration::from_secs(30), remote.inspect(&request))
        .await
        .expect("the client's own deadline ends the call");
    assert!(answer.is_err(), "{answer:?}");
}

/// Never answers.
struct Hung;

#[async_trait::async_trait]
impl ImageInspector for Hung {
    async fn inspect(
        &self,
        _: &InspectRequest,
    ) -> Result<Arc<multiarch_inspector::image::ImageInfo>, InspectError> {
        std::future::pending().await
    }
}

/// The service answers within its own deadline, waiting for a slot included: a hung
/// registry (or a flood of callers) costs each caller at most the deadline, with a reason.
#[tokio::test]
async fn the_service_answers_every_caller_within_its_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = ServiceLimits {
        max_in_flight: 1,
        deadline: Duration::from_millis(200),
        ..ServiceLimits::default()
    };
    tokio::spawn(grpc::serve(
        listener,
        None,
        Arc::new(Hung),
        limits,
        tokio_util::sync::CancellationToken::new(),
    ));
    let remote = RemoteInspector::new(&format!("http://{addr}")).unwrap();
    let request = InspectRequest {
        image: "quay.io/any/image:1".into(),
        namespace: "ns".into(),
        ..InspectRequest::default()
    };
    // Two at once with one slot: whether a call is inspecting or waiting for the slot,
    // it is told why at the deadline.
    let (first, second) = tokio::join!(remote.inspect(&request), remote.inspect(&request));
    for answer in [first, second] {
        let err = answer.unwrap_err();
        assert!(
            err.to_string().contains(
                "the image inspector did not answer for quay.io/any/image:1 within 200ms"
            ),
            "{err}"
        );
    }
}
