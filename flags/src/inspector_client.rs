//! How a role reaches the image inspector (`multiarch inspector`).

use std::path::PathBuf;

use multiarch_runtime::role_args::OpsArgs;
use serde::Serialize;

/// A leader-elected controller that always calls the inspector (the gate controller, the
/// ENoExec handler): the operator installs them the same way.
pub trait InspectorCallerFlags: crate::RoleFlags {
    /// Where it reaches the inspector, and where it serves its operations endpoint.
    fn inspector_and_ops(&mut self) -> (&mut InspectorServiceArgs, &mut OpsArgs);
}

/// How a role reaches the image inspector: over mutual TLS with a certificate from
/// multiarch's CA (the operator mounts one), or in plain HTTP/2 without it.
#[derive(Clone, Debug, Default, PartialEq, clap::Args, Serialize)]
pub struct InspectorTlsArgs {
    /// A directory with this role's client certificate for the inspector (`tls.crt`,
    /// `tls.key`) and the CAs the inspector's certificate must chain to (`ca.crt`): a
    /// mounted `kubernetes.io/tls` Secret, read again for every new connection.
    #[arg(long, value_name = "DIR", env = "MULTIARCH_INSPECTOR_TLS_DIR")]
    pub inspector_tls_dir: Option<PathBuf>,
}

/// The image inspector service a role always calls (the gate controller, the ENoExec
/// handler).
#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct InspectorServiceArgs {
    /// The image inspector (`multiarch inspector`); for the ENoExec handler, empty leaves
    /// out of its events whether the image has a build for the node's architecture.
    #[arg(
        long = "inspector-endpoint",
        default_value = "http://multiarch-inspector.multiarch.svc:9443",
        env = "MULTIARCH_INSPECTOR_ENDPOINT"
    )]
    pub endpoint: String,

    #[command(flatten)]
    #[serde(flatten)]
    pub tls: InspectorTlsArgs,
}
