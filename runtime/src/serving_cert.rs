//! A TLS server's certificate that can change while it serves: read from files and
//! reloaded when they change (the webhook: cert-manager or the operator rotates the
//! mounted Secret without restarting the pods), or set in memory (the operator reads its
//! own from the Secret it writes). New connections get the new certificate; open ones
//! keep theirs, so a rotation drops no request.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use rustls::{
    ServerConfig,
    crypto::ring::sign::any_supported_type,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use tracing::{info, warn};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the PEM holds no certificate")]
    NoPemCertificate,
    #[error("the PEM holds no usable private key: {0}")]
    PemKey(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: PathBuf },
    #[error("{path} holds no usable PEM private key: {detail}")]
    Key { path: PathBuf, detail: String },
    #[error("{path} holds no usable CA certificates: {detail}")]
    Ca { path: PathBuf, detail: String },
}

/// A certificate chain and its key, from PEM.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoPemCertificate);
    }
    let private =
        PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::PemKey(e.to_string()))?;
    let signer = any_supported_type(&private).map_err(|e| TlsError::PemKey(e.to_string()))?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

/// A file's bytes, or an error naming it.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The certificate chain and private key of two PEM files: a server's to serve, a
/// client's to present.
pub(crate) fn read_pair(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(cert)?)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_owned(),
        });
    }
    let private = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| TlsError::Key {
        path: key.to_owned(),
        detail: e.to_string(),
    })?;
    Ok((chain, private))
}

fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let (chain, private) = read_pair(cert, key)?;
    let signer = any_supported_type(&private).map_err(|e| TlsError::Key {
        path: key.to_owned(),
        detail: e.to_string(),
    })?;
    Ok(Arc::new(CertifiedKey::new(chain, signer)))
}

/// What tells a new file from the one loaded: its inode (the kubelet's atomic writer and
/// most tools write a new file), size and modification time.
type Stamp = Option<(u64, u64, SystemTime)>;

/// The stamps of `paths`. Read before the files are: a change in between is then seen
/// as a change (stamps read after could describe newer files than the ones loaded).
pub(crate) fn stamps(paths: &[PathBuf]) -> Vec<Stamp> {
    use std::os::unix::fs::MetadataExt;
    paths
        .iter()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.ino(), meta.len(), meta.modified().ok()?))
        })
        .collect()
}

/// Checks `paths` every `interval` (by a task on the current runtime) and, when one
/// changed since `loaded` (their [`stamps`] before the first load), calls `reload`;
/// a failed reload is logged and tried again at the next change, what is in use kept.
pub(crate) fn follow(
    paths: Vec<PathBuf>,
    mut loaded: Vec<Stamp>,
    interval: Duration,
    what: &'static str,
    reload: impl Fn() -> Result<(), TlsError> + Send + 'static,
) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let now = stamps(&paths);
            if now == loaded {
                continue;
            }
            match reload() {
                Ok(()) => {
                    loaded = now;
                    info!(file = %paths[0].display(), "{what} reloaded");
                }
                Err(e) => {
                    warn!(error = %e, "the new {what} cannot be used; keeping the previous one")
                }
            }
        }
    });
}

/// Serves the current certificate (none yet: handshakes fail until one is set).
#[derive(Debug, Default)]
pub struct ReloadingCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl ReloadingCert {
    /// Serves `key` from the next handshake on.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        *self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(key);
    }

    /// The certificate being served.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether a certificate is being served.
    pub fn is_set(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_some()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A TLS 1.2+ server configuration whose certificate follows the files, checked every
/// `interval`. A broken new pair is logged and the previous one kept.
pub fn server_config(
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
) -> Result<Arc<ServerConfig>, TlsError> {
    Ok(with_resolver(follow_files(cert, key, interval)?))
}

/// The certificate of the files, loaded now and again whenever they change (checked every
/// `interval`, by a task on the current runtime).
pub fn follow_files(
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
) -> Result<Arc<ReloadingCert>, TlsError> {
    let resolver = Arc::new(ReloadingCert::default());
    let paths = vec![cert.clone(), key.clone()];
    let loaded = stamps(&paths);
    resolver.set(load(&cert, &key)?);
    let watcher = resolver.clone();
    follow(paths, loaded, interval, "serving certificate", move || {
        watcher.set(load(&cert, &key)?);
        Ok(())
    });
    Ok(resolver)
}

/// A TLS 1.2+ server configuration serving whatever `resolver` holds.
pub fn with_resolver(resolver: Arc<ReloadingCert>) -> Arc<ServerConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut config = ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}
