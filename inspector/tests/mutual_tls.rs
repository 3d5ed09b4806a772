//! The inspector's gRPC port over mutual TLS: only a client holding a certificate from
//! multiarch's CA is answered; a plain connection, a TLS client without a certificate or
//! with one from another CA is refused before any inspection (so before any pull secret
//! is read); renewed files are picked up without a restart.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use multiarch_inspector::{
    ImageInspector, InspectError, InspectRequest,
    grpc::{self, RemoteInspector, ServiceLimits, proto},
    image::{ImageInfo, ManifestKind, PlatformEntry},
};
use multiarch_runtime::mutual_tls::{self, TlsDir};
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use tokio_util::sync::CancellationToken;

/// Answers every image with amd64 and counts the inspections that reached it.
#[derive(Default)]
struct Counting {
    inspections: AtomicUsize,
}

#[async_trait]
impl ImageInspector for Counting {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        self.inspections.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(ImageInfo {
            image: request.image.clone(),
            digest: "sha256:0".into(),
            kind: ManifestKind::Manifest,
            operator_bundle: false,
            binaries_pending: false,
            platforms: vec![PlatformEntry {
                os: "linux".into(),
                architecture: "amd64".into(),
                variant: None,
                digest: "sha256:0".into(),
                binary: None,
            }],
        }))
    }
}

struct Ca {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca {
        pem: cert.pem(),
        issuer: Issuer::new(params, key),
    }
}

/// Writes a certificate for `names` with `usage`, signed by `signer`, into `dir` as a
/// mounted `kubernetes.io/tls` Secret, trusting `trusted` (PEM).
fn write_dir(
    dir: &Path,
    signer: &Ca,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    trusted: &str,
) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &signer.issuer).unwrap();
    // Replaced as the kubelet does: a new file renamed over the old one.
    for (name, text) in [
        ("tls.crt", cert.pem()),
        ("tls.key", key.serialize_pem()),
        ("ca.crt", trusted.to_owned()),
    ] {
        let staging = dir.join(format!(".{name}.new"));
        std::fs::write(&staging, text).unwrap();
        std::fs::rename(&staging, dir.join(name)).unwrap();
    }
}

struct Served {
    port: u16,
    inspector: Arc<Counting>,
    shutdown: CancellationToken,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn serve(server_dir: &Path, reload: Duration) -> Served {
    let tls = mutual_tls::server_config(&TlsDir::new(server_dir), reload).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let inspector = Arc::new(Counting::default());
    let shutdown = CancellationToken::new();
    tokio::spawn(grpc::serve(
        listener,
        Some(tls),
        inspector.clone(),
        ServiceLimits::default(),
        shutdown.clone(),
    ));
    Served {
        port,
        inspector,
        shutdown,
    }
}

fn request() -> InspectRequest {
    InspectRequest {
        image: "quay.io/shop/web:1".into(),
        namespace: "victim".into(),
        pull_secrets: vec!["victim-regcred".into()],
        ..InspectRequest::default()
    }
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[tokio::test]
async fn only_a_client_with_a_certificate_from_multiarchs_ca_is_answered() {
    let multiarch = ca("multiarch-ca");
    let (server_dir, client_dir) = (tempdir(), tempdir());
    write_dir(
        server_dir.path(),
        &multiarch,
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &multiarch.pem,
    );
    write_dir(
        client_dir.path(),
        &multiarch,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        &multiarch.pem,
    );
    let served = serve(server_dir.path(), Duration::from_secs(3600)).await;
    let endpoint = format!("https://localhost:{}", served.port);

    let client = RemoteInspector::with_tls(&endpoint, TlsDir::new(client_dir.path())).unwrap();
    let answer = client.inspect(&request()).await.unwrap();
    assert_eq!(answer.platform_list().len(), 1);
    assert_eq!(served.inspector.inspections.load(Ordering::SeqCst), 1);
    // The health probe takes the same way, certificate and all, and inspects nothing.
    client.probe(Duration::from_secs(5)).await.unwrap();
    assert_eq!(served.inspector.inspections.load(Ordering::SeqCst), 1);

    // Plain HTTP/2 to the TLS port.
    let plain = RemoteInspector::new(&format!("http://127.0.0.1:{}", served.port)).unwrap();
    let err = plain.inspect(&request()).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    let unanswered = plain.probe(Duration::from_secs(1)).await.unwrap_err();
    assert!(unanswered.contains("image inspector"), "{unanswered}");

    // TLS that trusts the server but presents no certificate of its own.
    let channel = tonic::transport::Channel::from_shared(endpoint.clone())
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(&multiarch.pem))
                .domain_name("localhost"),
        )
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    let anonymous = proto::inspector_client::InspectorClient::new(channel)
        .inspect(proto::InspectRequest {
            image: "quay.io/shop/web:1".into(),
            namespace: "victim".into(),
            pull_secrets: vec!["victim-regcred".into()],
            ..proto::InspectRequest::default()
        })
        .await;
    assert!(
        anonymous.is_err(),
        "a client without a certificate was answered: {anonymous:?}"
    );

    // A certificate from another CA (a tenant's own), trusting the server.
    let other = ca("tenant-ca");
    let tenant_dir = tempdir();
    write_dir(
        tenant_dir.path(),
        &other,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        &multiarch.pem,
    );
    let tenant = RemoteInspector::with_tls(&endpoint, TlsDir::new(tenant_dir.path())).unwrap();
    let err = tenant.inspect(&request()).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("UnknownCA"), "{err}");

    assert_eq!(
        served.inspector.inspections.load(Ordering::SeqCst),
        1,
        "a refused caller reached the inspector"
    );
}

#[tokio::test]
async fn a_client_refuses_an_inspector_whose_certificate_is_not_from_multiarchs_ca() {
    let multiarch = ca("multiarch-ca");
    let impostor = ca("impostor-ca");
    let (server_dir, client_dir) = (tempdir(), tempdir());
    // The impostor trusts multiarch's clients, so only the client's check can refuse it.
    write_dir(
        server_dir.path(),
        &impostor,
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &multiarch.pem,
    );
    write_dir(
        client_dir.path(),
        &multiarch,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        &multiarch.pem,
    );
    let served = serve(server_dir.path(), Duration::from_secs(3600)).await;
    let client = RemoteInspector::with_tls(
        &format!("https://localhost:{}", served.port),
        TlsDir::new(client_dir.path()),
    )
    .unwrap();
    let err = client.inspect(&request()).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    assert_eq!(served.inspector.inspections.load(Ordering::SeqCst), 0);
}

/// The operator rotates the CA: the server's files and the clients' are replaced in
/// place. Neither restarts, and a client with the new CA's certificate is answered.
#[tokio::test]
async fn renewed_files_are_used_without_a_restart() {
    let old = ca("multiarch-ca-1");
    let new = ca("multiarch-ca-2");
    let (server_dir, client_dir) = (tempdir(), tempdir());
    write_dir(
        server_dir.path(),
        &old,
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &old.pem,
    );
    write_dir(
        client_dir.path(),
        &old,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        &old.pem,
    );
    let served = serve(server_dir.path(), Duration::from_millis(20)).await;
    let endpoint = format!("https://localhost:{}", served.port);
    RemoteInspector::with_tls(&endpoint, TlsDir::new(client_dir.path()))
        .unwrap()
        .inspect(&request())
        .await
        .unwrap();

    // Everything re-issued by the new CA, which alone is trusted from now on.
    write_dir(
        server_dir.path(),
        &new,
        &["localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &new.pem,
    );
    write_dir(
        client_dir.path(),
        &new,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        &new.pem,
    );
    // A new client for each attempt: a fresh connection, so the new files are read.
    let mut answered = false;
    for _ in 0..1500 {
        let client = RemoteInspector::with_tls(&endpoint, TlsDir::new(client_dir.path())).unwrap();
        if client.inspect(&request()).await.is_ok() {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        answered,
        "the server never picked up the new CA and certificate"
    );
}

#[test]
fn a_client_directory_without_a_ca_is_a_clear_error_at_start() {
    let multiarch = ca("multiarch-ca");
    let dir = tempdir();
    write_dir(
        dir.path(),
        &multiarch,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
        "",
    );
    let err = mutual_tls::client_config(&TlsDir::new(dir.path())).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} holds no PEM certificate",
            dir.path().join("ca.crt").display()
        )
    );
}
