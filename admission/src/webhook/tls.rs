//! The webhook's serving certificate: the shared runtime's, read from the mounted files
//! and reloaded when they change.

use std::{path::PathBuf, sync::Arc, time::Duration};

use multiarch_runtime::{
    mutual_tls::{self, ClientCertificates, TlsDir},
    serving_cert::{TlsError, server_config},
};
use rustls::ServerConfig;

/// How often the mounted files are checked for a new certificate or CA.
const RELOAD_CHECK: Duration = Duration::from_secs(10);

/// The webhook port's TLS: its certificate `cert`/`key`; with `client_ca`, a client
/// certificate a caller presents must chain to it (the API server's, set in its admission
/// configuration), and reviews are answered only for callers that presented one
/// (`server::router`); the kubelet's probes and Prometheus, which present none, still
/// reach `/healthz`, `/readyz` and `/metrics`.
pub fn webhook_tls(
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
) -> Result<Arc<ServerConfig>, TlsError> {
    match client_ca {
        Some(ca) => mutual_tls::server_config_with(
            &TlsDir { cert, key, ca },
            RELOAD_CHECK,
            ClientCertificates::Optional,
        ),
        None => server_config(cert, key, RELOAD_CHECK),
    }
}
