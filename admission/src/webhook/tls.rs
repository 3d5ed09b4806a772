//! The webhook's serving certificate: the shared runtime's, read from the mounted files
//! and reloaded when they change.

use std::{path::PathBuf, sync::Arc, time::Duration};

use multiarch_runtime::mutual_tls::{self, TlsDir};
use rustls::ServerConfig;

pub use multiarch_runtime::serving_cert::{TlsError, server_config};

/// How often the mounted files are checked for a new certificate or CA.
const RELOAD_CHECK: Duration = Duration::from_secs(10);

/// The webhook port's TLS: its certificate `cert`/`key`; with `client_ca`, only callers
/// with a client certificate chaining to it get past the handshake (the API server's,
/// set in its admission configuration).
pub fn webhook_tls(
    cert: PathBuf,
    key: PathBuf,
    client_ca: Option<PathBuf>,
) -> Result<Arc<ServerConfig>, TlsError> {
    match client_ca {
        Some(ca) => mutual_tls::server_config(&TlsDir { cert, key, ca }, RELOAD_CHECK),
        None => server_config(cert, key, RELOAD_CHECK),
    }
}
