//! Inspection failures, each saying what a user must fix.

use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InspectError {
    #[error("invalid image reference {image:?}: {reason}")]
    InvalidReference { image: String, reason: String },
    #[error("registry {registry} is blocked by the registry settings")]
    Blocked { registry: String },
    #[error(
        "unauthorized at {registry}: the pod's pull secrets have no credentials for this registry"
    )]
    NoCredentials { registry: String },
    #[error("unauthorized at {registry}: the registry rejected the pod's pull-secret credentials")]
    CredentialsRejected { registry: String },
    #[error("image {image} not found: check the repository name and the tag or digest")]
    NotFound { image: String },
    #[error("registry {registry} is unreachable: {detail}")]
    Unreachable { registry: String, detail: String },
    #[error("registry {registry} did not answer within {after:?}")]
    Timeout { registry: String, after: Duration },
    #[error(
        "registry {registry} answered HTTP {status} {attempts} times in a row; it may be overloaded or down"
    )]
    Server {
        registry: String,
        status: u16,
        attempts: u32,
    },
    #[error(
        "the registry's TLS certificate for {registry} is not trusted: {detail} (set caFile for it in the registry settings)"
    )]
    Tls { registry: String, detail: String },
    #[error("image {image}: {detail}")]
    Malformed { image: String, detail: String },
    /// No memory left for another body being read (see `body_budget`): retried.
    #[error("registry {registry}: {detail}")]
    Busy { registry: String, detail: String },
    /// The registry sent the inspector somewhere it may not go (see `address_policy`).
    #[error("registry {registry}: {detail}")]
    Refused { registry: String, detail: String },
    #[error("image {image}: indexes nested deeper than {depth} levels")]
    TooDeep { image: String, depth: usize },
    #[error("cannot read pull secret {namespace}/{name}: {detail}")]
    Secret {
        namespace: String,
        name: String,
        detail: String,
    },
    /// What a pod's pull secrets hold is more than is read for one pod: a limit, not a
    /// failure a retry can mend.
    #[error("the pull secrets of the pod in namespace {namespace}: {detail}")]
    PullSecretsOverLimit { namespace: String, detail: String },
    #[error("the image inspector service failed: {0}")]
    Service(String),
    /// An error reported by a remote inspector (gRPC), with its kind label.
    #[error("{message}")]
    Remote { kind: String, message: String },
}

impl InspectError {
    /// Worth trying again with backoff (the registry may recover); never for answers
    /// that a retry cannot change (401, 403, 404, bad references, bad manifests).
    pub fn is_transient(&self) -> bool {
        match self {
            InspectError::Unreachable { .. }
            | InspectError::Busy { .. }
            | InspectError::Timeout { .. }
            | InspectError::Server { .. }
            | InspectError::Secret { .. }
            | InspectError::Service(_) => true,
            InspectError::Remote { kind, .. } => {
                matches!(
                    kind.as_str(),
                    "unreachable" | "busy" | "timeout" | "server_error" | "secret" | "service"
                )
            }
            _ => false,
        }
    }

    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            InspectError::InvalidReference { .. } => "invalid_reference",
            InspectError::Blocked { .. } => "blocked",
            InspectError::NoCredentials { .. } => "no_credentials",
            InspectError::CredentialsRejected { .. } => "credentials_rejected",
            InspectError::NotFound { .. } => "not_found",
            InspectError::Unreachable { .. } => "unreachable",
            InspectError::Timeout { .. } => "timeout",
            InspectError::Server { .. } => "server_error",
            InspectError::Tls { .. } => "tls",
            InspectError::Malformed { .. } => "malformed",
            InspectError::Refused { .. } => "refused",
            InspectError::Busy { .. } => "busy",
            InspectError::TooDeep { .. } => "too_deep",
            InspectError::Secret { .. } => "secret",
            InspectError::PullSecretsOverLimit { .. } => "pull_secrets_over_limit",
            InspectError::Service(_) => "service",
            InspectError::Remote { .. } => "remote",
        }
    }
}
