//! A review the API server did not send: any pod that reaches the webhook's port can
//! post an AdmissionReview naming another namespace and its pull secrets. Unless every
//! caller is known to be the API server, the lookup at admission uses no credentials, so
//! the answer says nothing about what those secrets can read. With `--client-ca`, a
//! caller without the API server's client certificate is refused at the handshake.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use async_trait::async_trait;
use multiarch_admission::webhook::{
    decision::WebhookConfig,
    image_lookup::{AdmissionLookup, Credentials},
    metrics::WebhookMetrics,
    server::{WebhookState, answer, serve},
    tls::webhook_tls,
};
use multiarch_crd::PlacementMode;
use multiarch_inspector::{
    ImageInfo, ImageInspector, InspectError, InspectRequest,
    image::{ManifestKind, PlatformEntry},
};
use multiarch_runtime::https_server::bind;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Records every request; a private image is readable only with the victim's secret.
#[derive(Default)]
struct Recording {
    requests: Mutex<Vec<InspectRequest>>,
}

#[async_trait]
impl ImageInspector for Recording {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        self.requests.lock().unwrap().push(request.clone());
        if !request.pull_secrets.contains(&"victim-regcred".to_owned()) {
            return Err(InspectError::NoCredentials {
                registry: "registry.victim.example".into(),
            });
        }
        Ok(Arc::new(ImageInfo {
            image: request.image.clone(),
            digest: "sha256:0".into(),
            kind: ManifestKind::Manifest,
            operator_bundle: false,
            binaries_pending: false,
            platforms: vec![PlatformEntry {
                os: "linux".into(),
                architecture: "arm64".into(),
                variant: None,
                digest: "sha256:0".into(),
                binary: None,
            }],
        }))
    }
}

fn state(inspector: Arc<Recording>, credentials: Credentials) -> WebhookState {
    WebhookState {
        config: Arc::new(RwLock::new(WebhookConfig::new(
            PlacementMode::Scheduler,
            "multiarch-scheduler",
            "multiarch",
        ))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup: Some(AdmissionLookup::new(
            inspector,
            Duration::from_secs(20),
            8,
            credentials,
        )),
        reviews_need_client_certificate: false,
    }
}

/// A tenant's crafted review: the victim's namespace, pull secret and service account.
fn spoofed() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "6f1c2a55-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "victim", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:tenant:default"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "probe", "namespace": "victim"},
                "spec": {"containers": [{"name": "app", "image": "registry.victim.example/secret/app:1",
                                         "imagePullPolicy": "Always"}],
                    "imagePullSecrets": [{"name": "victim-regcred"}],
                    "serviceAccountName": "victim-builder"}},
            "oldObject": null, "dryRun": false
        }
    }))
    .unwrap()
}

async fn review(state: &WebhookState) -> Value {
    let config = state.config.read().unwrap().clone();
    answer(state, &config, spoofed().into()).await.unwrap().0
}

#[tokio::test]
async fn a_review_from_an_unverified_caller_is_looked_up_without_any_credentials() {
    let inspector = Arc::new(Recording::default());
    let state = state(inspector.clone(), Credentials::Anonymous);
    let response = review(&state).await;
    assert_eq!(response["response"]["allowed"], true);
    let requests = inspector.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert!(requests[0].pull_secrets.is_empty(), "{requests:?}");
    assert_eq!(requests[0].service_account, None);

    // The answer is the same as for an image that does not exist: routed, no constraint.
    let patch = response["response"]["patch"].as_str().unwrap();
    let patch = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, patch).unwrap(),
    )
    .unwrap();
    assert!(patch.contains("multiarch-scheduler"), "{patch}");
    assert!(!patch.contains("arm64"), "{patch}");
}

/// What the policy protects: with the pod's credentials (callers verified), the same
/// review reads the private image and the patch says its architecture.
#[tokio::test]
async fn a_review_from_the_verified_api_server_uses_the_pods_credentials() {
    let inspector = Arc::new(Recording::default());
    let state = state(inspector.clone(), Credentials::PodSecrets);
    let response = review(&state).await;
    let requests = inspector.requests.lock().unwrap().clone();
    assert_eq!(requests[0].pull_secrets, ["victim-regcred"]);
    assert_eq!(
        requests[0].service_account.as_deref(),
        Some("victim-builder")
    );
    let patch = response["response"]["patch"].as_str().unwrap();
    let patch = String::from_utf8(
        base64::Engine::decode(&base64::engine::general_purpose::STANDARD, patch).unwrap(),
    )
    .unwrap();
    assert!(patch.contains("arm64"), "{patch}");
}

struct Identity {
    cert: String,
    key: String,
}

fn issue(ca: &CertifiedIssuer<'static, KeyPair>, names: &[&str]) -> Identity {
    let key = KeyPair::generate().unwrap();
    let params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    let cert = params.signed_by(&key, ca).unwrap();
    Identity {
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// POSTs the spoofed review over TLS, presenting `identity` when given; the status line,
/// or the error that ended the exchange.
async fn post(
    addr: std::net::SocketAddr,
    server_ca: &str,
    identity: Option<&Identity>,
) -> Result<String, std::io::Error> {
    let body = spoofed();
    let head = format!(
        "POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut request = head.into_bytes();
    request.extend(body);
    exchange(addr, server_ca, identity, &request).await
}

/// GETs `path` over TLS without a client certificate, as the kubelet's probes do.
async fn get(
    addr: std::net::SocketAddr,
    server_ca: &str,
    path: &str,
) -> Result<String, std::io::Error> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    exchange(addr, server_ca, None, request.as_bytes()).await
}

/// Sends `request` over TLS, presenting `identity` when given; the status line, or the
/// error that ended the exchange.
async fn exchange(
    addr: std::net::SocketAddr,
    server_ca: &str,
    identity: Option<&Identity>,
    request: &[u8],
) -> Result<String, std::io::Error> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(server_ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match identity {
        Some(id) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(id.cert.as_bytes())
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_slice(id.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await?;
    tls.write_all(request).await?;
    let mut response = Vec::new();
    tls.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response).to_string();
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_the_api_servers_certificate_gets_a_review_answered() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let serving_ca = authority("multiarch-ca");
    let api_server_ca = authority("front-proxy-ca");
    let dir = tempfile::tempdir().unwrap();
    let serving = issue(&serving_ca, &["127.0.0.1"]);
    std::fs::write(dir.path().join("tls.crt"), &serving.cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), &serving.key).unwrap();
    std::fs::write(dir.path().join("api-server-ca.crt"), api_server_ca.pem()).unwrap();
    // As `multiarch webhook --client-ca` serves.
    let tls = webhook_tls(
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        Some(dir.path().join("api-server-ca.crt")),
    )
    .unwrap();
    let inspector = Arc::new(Recording::default());
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let mut state = state(inspector.clone(), Credentials::PodSecrets);
    state.reviews_need_client_certificate = true;
    tokio::spawn(serve(listener, tls, state, shutdown.clone()));
    let serving_ca_pem = serving_ca.pem();

    // No client certificate: the review is refused, the probes and metrics are served
    // (the kubelet and Prometheus present none).
    let anonymous = post(addr, &serving_ca_pem, None).await.unwrap();
    assert!(anonymous.contains("403"), "{anonymous}");
    for path in ["/healthz", "/readyz", "/metrics"] {
        let status = get(addr, &serving_ca_pem, path).await.unwrap();
        assert!(status.contains("200"), "{path}: {status}");
    }
    // One from a CA other than the API server's: refused at the handshake.
    let tenant = issue(&authority("tenant-ca"), &[]);
    let forged = post(addr, &serving_ca_pem, Some(&tenant)).await;
    assert!(forged.is_err(), "{forged:?}");
    assert!(
        inspector.requests.lock().unwrap().is_empty(),
        "a refused caller caused a lookup"
    );

    // The API server's client certificate: answered, with the pod's credentials.
    let api_server = issue(&api_server_ca, &[]);
    let status = post(addr, &serving_ca_pem, Some(&api_server))
        .await
        .unwrap();
    assert!(status.contains("200"), "{status}");
    assert_eq!(inspector.requests.lock().unwrap().len(), 1);
    shutdown.cancel();
}
