//! Mutual TLS: between multiarch's own components (the image inspector and its callers),
//! where both sides hold a certificate from multiarch's CA, so a pod that can reach the
//! inspector's port but holds no such certificate is refused at the handshake; and for
//! the webhook when the cluster has the API server present a client certificate.
//!
//! Each side reads a directory laid out as a mounted `kubernetes.io/tls` Secret
//! (`tls.crt`, `tls.key`, `ca.crt`) and follows it: the operator renews certificates and
//! rotates the CA months ahead, and the kubelet replaces the files in place, so a
//! long-running pod must pick up new files without a restart. The server reloads its
//! certificate and the CAs it trusts when the files change; a client reads the files for
//! every new connection (connections are long-lived, so that is rare).

use std::{
    fmt,
    future::Future,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{Arc, RwLock},
    task::{Context, Poll},
    time::Duration,
};

use hyper_util::rt::TokioIo;
use rustls::{
    ClientConfig, DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig,
    SignatureScheme,
    client::danger::HandshakeSignatureValid,
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
    server::{
        WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
};
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

use crate::serving_cert::{TlsError, follow, follow_files, read, read_pair, stamps};

/// The files of a mounted `kubernetes.io/tls` Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsDir {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CAs the peer's certificate must chain to.
    pub ca: PathBuf,
}

impl TlsDir {
    /// `tls.crt`, `tls.key` and `ca.crt` in `dir`.
    pub fn new(dir: &Path) -> Self {
        TlsDir {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            ca: dir.join("ca.crt"),
        }
    }
}

/// The CAs in a PEM file; none is an error (trusting nothing would refuse every peer
/// with a message that hides why).
fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let pem = read(path)?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok) {
        store.add(cert).map_err(|e| TlsError::Ca {
            path: path.to_owned(),
            detail: e.to_string(),
        })?;
    }
    if store.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(store)
}

fn client_verifier(ca: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(ca)?),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| TlsError::Ca {
        path: ca.to_owned(),
        detail: e.to_string(),
    })
}

/// Verifies client certificates against the CAs of a file, reloaded when it changes.
pub struct FollowingClientVerifier {
    current: RwLock<Arc<dyn ClientCertVerifier>>,
    /// Whether a client must present one at all (else one it presents must still verify).
    mandatory: bool,
}

impl fmt::Debug for FollowingClientVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FollowingClientVerifier").finish()
    }
}

impl FollowingClientVerifier {
    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn set(&self, verifier: Arc<dyn ClientCertVerifier>) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = verifier;
    }
}

impl ClientCertVerifier for FollowingClientVerifier {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // Hints are optional, and borrowed from a verifier that may be replaced.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

/// Whether a port's clients must present a certificate at the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientCertificates {
    /// Every client (the inspector's gRPC port: only multiarch's components call it).
    Required,
    /// A client may present none (the kubelet's probes, Prometheus); one it presents must
    /// chain to the CAs, and the handler decides what a client without one may do (the
    /// webhook's reviews need one: see `Peer::verified_client_certificate`).
    Optional,
}

/// A TLS 1.2+ server configuration that serves `dir`'s certificate and requires every
/// client to present one chaining to `dir`'s CAs; both follow the files (checked every
/// `interval`, by a task on the current runtime). A broken new file is logged and the
/// previous one kept.
pub fn server_config(dir: &TlsDir, interval: Duration) -> Result<Arc<ServerConfig>, TlsError> {
    server_config_with(dir, interval, ClientCertificates::Required)
}

/// [`server_config`], with client certificates required or optional.
pub fn server_config_with(
    dir: &TlsDir,
    interval: Duration,
    clients: ClientCertificates,
) -> Result<Arc<ServerConfig>, TlsError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certificate = follow_files(dir.cert.clone(), dir.key.clone(), interval)?;
    let paths = vec![dir.ca.clone()];
    let loaded = stamps(&paths);
    let verifier = Arc::new(FollowingClientVerifier {
        current: RwLock::new(client_verifier(&dir.ca)?),
        mandatory: clients == ClientCertificates::Required,
    });
    let follower = verifier.clone();
    let ca = dir.ca.clone();
    follow(paths, loaded, interval, "client CAs", move || {
        follower.set(client_verifier(&ca)?);
        Ok(())
    });
    let mut config = ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(certificate);
    // gRPC speaks HTTP/2; the API server calling a webhook may speak either.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration from `dir` as it is now: its certificate, and its CAs for the
/// server's.
pub fn client_config(dir: &TlsDir) -> Result<Arc<ClientConfig>, TlsError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (chain, key) = read_pair(&dir.cert, &dir.key)?;
    let mut config = ClientConfig::builder()
        .with_root_certificates(roots(&dir.ca)?)
        .with_client_auth_cert(chain, key)
        .map_err(|e| TlsError::Key {
            path: dir.key.clone(),
            detail: e.to_string(),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// Opens TLS connections for a gRPC channel (tonic's `connect_with_connector`): TCP to
/// the URI's host and port, then a handshake presenting `dir`'s certificate and checking
/// the server's against `dir`'s CAs and the URI's host name, all within `timeout`.
#[derive(Clone, Debug)]
pub struct MutualTlsConnector {
    dir: TlsDir,
    timeout: Duration,
}

impl MutualTlsConnector {
    pub fn new(dir: TlsDir, timeout: Duration) -> Self {
        MutualTlsConnector { dir, timeout }
    }
}

type Connecting =
    Pin<Box<dyn Future<Output = std::io::Result<TokioIo<TlsStream<TcpStream>>>> + Send>>;

impl tower::Service<http::Uri> for MutualTlsConnector {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let dir = self.dir.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let invalid =
                |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
            let host = uri
                .host()
                .ok_or_else(|| invalid(format!("{uri} names no host")))?
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let config = client_config(&dir).map_err(std::io::Error::other)?;
            let name = ServerName::try_from(host.clone())
                .map_err(|e| invalid(format!("{host} is not a server name: {e}")))?;
            let connect = async {
                let tcp = TcpStream::connect((host.as_str(), port)).await?;
                tcp.set_nodelay(true)?;
                TlsConnector::from(config).connect(name, tcp).await
            };
            match tokio::time::timeout(timeout, connect).await {
                Ok(stream) => Ok(TokioIo::new(stream?)),
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no TLS connection to {host}:{port} within {timeout:?}"),
                )),
            }
        })
    }
}
