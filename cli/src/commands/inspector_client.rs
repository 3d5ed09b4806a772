//! How the roles that ask the image inspector (scheduler, webhook, gate controller,
//! ENOEXEC handler) reach it: over mutual TLS when a certificate directory is given.

use multiarch_inspector::grpc::RemoteInspector;
use multiarch_runtime::mutual_tls::TlsDir;
use tracing::warn;

#[cfg(any(feature = "admission", feature = "enoexec-handler"))]
use multiarch_flags::InspectorServiceArgs;
use multiarch_flags::InspectorTlsArgs;

/// The inspector service a role always calls.
#[cfg(any(feature = "admission", feature = "enoexec-handler"))]
pub fn remote_inspector(service: &InspectorServiceArgs) -> anyhow::Result<RemoteInspector> {
    remote_inspector_at(&service.endpoint, &service.tls)
}

/// The inspector at `endpoint`, with the client certificate of `tls` when it names one.
pub fn remote_inspector_at(
    endpoint: &str,
    tls: &InspectorTlsArgs,
) -> anyhow::Result<RemoteInspector> {
    match &tls.inspector_tls_dir {
        Some(dir) => {
            let files = TlsDir::new(dir);
            // Fail at start, where the log is read, rather than at the first pod: the
            // files are read again for every connection, so a rotation still applies.
            multiarch_runtime::mutual_tls::client_config(&files)?;
            Ok(RemoteInspector::with_tls(endpoint, files)?)
        }
        None => {
            warn!(%endpoint, "calling the image inspector without TLS (no --inspector-tls-dir)");
            Ok(RemoteInspector::new(endpoint)?)
        }
    }
}
