//! The gRPC service (`multiarch inspector --listen`) and its client, which implements the
//! same [`ImageInspector`] trait as the in-process inspector.

use std::sync::Arc;

use async_trait::async_trait;
use tonic::{Request, Response, Status, transport::Channel};

use crate::{
    error::InspectError,
    image::{ImageInfo, ManifestKind, PlatformEntry},
    inspector::{ImageInspector, InspectRequest},
};

#[allow(clippy::all, clippy::unwrap_used)] // generated code
pub mod proto {
    tonic::include_proto!("multiarch.inspector.v1");
}

use proto::inspector_client::InspectorClient;
pub use proto::inspector_server::InspectorServer;

/// The error kind travels in this metadata key, so clients keep typed retry decisions.
const ERROR_KIND: &str = "x-multiarch-error-kind";

/// Serves an inspector over gRPC.
pub struct InspectorService {
    inner: Arc<dyn ImageInspector>,
}

impl InspectorService {
    pub fn new(inner: Arc<dyn ImageInspector>) -> InspectorServer<Self> {
        InspectorServer::new(InspectorService { inner })
    }
}

fn to_status(error: &InspectError) -> Status {
    let message = error.to_string();
    let mut status = match error {
        InspectError::InvalidReference { .. } => Status::invalid_argument(message),
        InspectError::NotFound { .. } => Status::not_found(message),
        InspectError::NoCredentials { .. } | InspectError::CredentialsRejected { .. } => {
            Status::permission_denied(message)
        }
        InspectError::Timeout { .. } => Status::deadline_exceeded(message),
        e if e.is_transient() => Status::unavailable(message),
        _ => Status::failed_precondition(message),
    };
    let kind = match error {
        InspectError::Remote { kind, .. } => kind.clone(),
        other => other.metric_label().to_owned(),
    };
    if let Ok(value) = kind.parse() {
        status.metadata_mut().insert(ERROR_KIND, value);
    }
    status
}

#[async_trait]
impl proto::inspector_server::Inspector for InspectorService {
    async fn inspect(
        &self,
        request: Request<proto::InspectRequest>,
    ) -> Result<Response<proto::InspectResponse>, Status> {
        let r = request.into_inner();
        let request = InspectRequest {
            image: r.image,
            namespace: r.namespace,
            pull_secrets: r.pull_secrets,
            service_account: Some(r.service_account).filter(|s| !s.is_empty()),
            bypass_cache: r.bypass_cache,
        };
        let info = self
            .inner
            .inspect(&request)
            .await
            .map_err(|e| to_status(&e))?;
        Ok(Response::new(proto::InspectResponse {
            image: info.image.clone(),
            digest: info.digest.clone(),
            kind: match info.kind {
                ManifestKind::Index => proto::inspect_response::Kind::Index,
                ManifestKind::Manifest => proto::inspect_response::Kind::Manifest,
            }
            .into(),
            platforms: info
                .platforms
                .iter()
                .map(|p| proto::Platform {
                    os: p.os.clone(),
                    architecture: p.architecture.clone(),
                    variant: p.variant.clone().unwrap_or_default(),
                    digest: p.digest.clone(),
                })
                .collect(),
        }))
    }
}

/// Connecting to the inspector Service.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// One inspection: longer than the inspector's own registry deadline (30 s by default,
/// retries included), so its answer (or its error) arrives first.
const CALL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(45);

/// A remote inspector.
#[derive(Clone)]
pub struct RemoteInspector {
    client: InspectorClient<Channel>,
}

impl RemoteInspector {
    /// Connects lazily: the first call opens the connection. Every call has a deadline:
    /// a hung inspector is an error, never a caller waiting forever.
    pub fn new(endpoint: &str) -> Result<Self, InspectError> {
        Self::with_deadline(endpoint, CALL_DEADLINE)
    }

    /// [`new`](Self::new) with another deadline per call.
    pub fn with_deadline(
        endpoint: &str,
        deadline: std::time::Duration,
    ) -> Result<Self, InspectError> {
        let channel = Channel::from_shared(endpoint.to_owned())
            .map_err(|e| {
                InspectError::Service(format!("invalid inspector endpoint {endpoint:?}: {e}"))
            })?
            .connect_timeout(CONNECT_TIMEOUT.min(deadline))
            .timeout(deadline)
            .connect_lazy();
        Ok(RemoteInspector {
            client: InspectorClient::new(channel),
        })
    }
}

#[async_trait]
impl ImageInspector for RemoteInspector {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        let message = proto::InspectRequest {
            image: request.image.clone(),
            namespace: request.namespace.clone(),
            pull_secrets: request.pull_secrets.clone(),
            service_account: request.service_account.clone().unwrap_or_default(),
            bypass_cache: request.bypass_cache,
        };
        let response = self
            .client
            .clone()
            .inspect(message)
            .await
            .map_err(|status| {
                let kind = status
                    .metadata()
                    .get(ERROR_KIND)
                    .and_then(|v| v.to_str().ok())
                    .map_or_else(|| "service".to_owned(), str::to_owned);
                let message = if status.metadata().get(ERROR_KIND).is_some() {
                    status.message().to_owned()
                } else {
                    format!("the image inspector service failed: {}", status.message())
                };
                InspectError::Remote { kind, message }
            })?;
        let r = response.into_inner();
        Ok(Arc::new(ImageInfo {
            image: r.image,
            digest: r.digest,
            kind: if r.kind == i32::from(proto::inspect_response::Kind::Manifest) {
                ManifestKind::Manifest
            } else {
                ManifestKind::Index
            },
            platforms: r
                .platforms
                .into_iter()
                .map(|p| PlatformEntry {
                    os: p.os,
                    architecture: p.architecture,
                    variant: Some(p.variant).filter(|v| !v.is_empty()),
                    digest: p.digest,
                })
                .collect(),
        }))
    }
}
