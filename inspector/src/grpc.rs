//! The gRPC service (`multiarch inspector --listen`) and its client, which implements the
//! same [`ImageInspector`] trait as the in-process inspector.

use std::{path::Path, sync::Arc, time::Duration};

use async_trait::async_trait;
use multiarch_runtime::server_limits::ServerLimits;
use multiarch_runtime::{
    bounded_server::{self},
    mutual_tls::{self, MutualTlsConnector, TlsDir},
    serving_cert::TlsError,
};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, transport::Channel};

use crate::{
    error::InspectError,
    image::{BinarySummary, ImageInfo, ManifestKind, PlatformEntry},
    inspector::{ImageInspector, InspectRequest},
};

#[allow(clippy::all, clippy::unwrap_used, clippy::too_many_lines)] // generated code
pub mod proto {
    tonic::include_proto!("multiarch.inspector.v1");
}

use proto::inspector_client::InspectorClient;
pub use proto::inspector_server::InspectorServer;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

/// The error kind travels in this metadata key, so clients keep typed retry decisions.
const ERROR_KIND: &str = "x-multiarch-error-kind";

/// What the service takes on at once, and for how long.
#[derive(Clone, Copy, Debug)]
pub struct ServiceLimits {
    /// Inspections running at once; more wait for a slot within their deadline.
    pub max_in_flight: usize,
    /// From arrival to answer, waiting for a slot included: longer than the registry
    /// deadline (30 s, retries included), shorter than the clients' own (45 s), so the
    /// client reads why instead of timing out.
    pub deadline: Duration,
    /// The connections of the gRPC port.
    pub connections: ServerLimits,
}

impl Default for ServiceLimits {
    fn default() -> Self {
        ServiceLimits {
            max_in_flight: 512,
            deadline: Duration::from_secs(40),
            connections: ServerLimits {
                max_connections: 1024,
                // Callers reach it through its Service: serve on while the endpoint goes.
                shutdown_delay: Duration::from_secs(5),
                // Beyond the service's own deadline, which answers first.
                request_timeout: Duration::from_secs(45),
                ..ServerLimits::default()
            },
        }
    }
}

/// Serves an inspector over gRPC.
pub struct InspectorService {
    inner: Arc<dyn ImageInspector>,
    in_flight: Arc<Semaphore>,
    deadline: Duration,
}

impl InspectorService {
    pub fn new(inner: Arc<dyn ImageInspector>) -> InspectorServer<Self> {
        Self::with_limits(inner, &ServiceLimits::default())
    }

    pub fn with_limits(
        inner: Arc<dyn ImageInspector>,
        limits: &ServiceLimits,
    ) -> InspectorServer<Self> {
        InspectorServer::new(InspectorService {
            inner,
            in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
            deadline: limits.deadline,
        })
    }
}

/// Serves `inner` on `listener` until `shutdown` is cancelled: over mutual TLS when `tls`
/// is given (only clients with a certificate from multiarch's CA get past the
/// handshake), in plain HTTP/2 otherwise; with the connection bounds every served port
/// has.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    inner: Arc<dyn ImageInspector>,
    limits: ServiceLimits,
    shutdown: CancellationToken,
) {
    // grpc.health.v1 beside the service: its callers (the scheduler's readiness) ask
    // whether they reach it without inspecting anything.
    let (_health, health_service) = tonic_health::server::health_reporter();
    let router = tonic::service::Routes::new(InspectorService::with_limits(inner, &limits))
        .add_service(health_service)
        .prepare()
        .into_axum_router();
    bounded_server::serve(listener, tls, router, shutdown, limits.connections).await;
}

/// The service port's TLS from a directory (`tls.crt`, `tls.key`, and the `ca.crt` every
/// client's certificate must chain to), its files reloaded when they change; without one,
/// plain HTTP/2, with a warning: the port then answers whoever reaches it, with the pull
/// secrets they name.
pub fn server_tls(dir: Option<&Path>) -> Result<Option<Arc<rustls::ServerConfig>>, TlsError> {
    match dir {
        Some(dir) => {
            mutual_tls::server_config(&TlsDir::new(dir), Duration::from_secs(10)).map(Some)
        }
        None => {
            tracing::warn!(
                "serving gRPC without TLS (no --tls-dir): any client that reaches the port is answered, with the pull secrets it names"
            );
            Ok(None)
        }
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
        let image = request.image.clone();
        let answer = tokio::time::timeout(self.deadline, async {
            let _slot = self
                .in_flight
                .acquire()
                .await
                .map_err(|_| Status::unavailable("the image inspector is shutting down"))?;
            self.inner
                .inspect(&request)
                .await
                .map_err(|e| to_status(&e))
        })
        .await;
        let info = match answer {
            Ok(answer) => answer?,
            Err(_) => {
                return Err(Status::deadline_exceeded(format!(
                    "the image inspector did not answer for {image} within {:?}",
                    self.deadline
                )));
            }
        };
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
                    binary_architecture: p
                        .binary
                        .as_ref()
                        .map(|b| b.architecture.clone())
                        .unwrap_or_default(),
                    binary_x86_64_level: p
                        .binary
                        .as_ref()
                        .and_then(|b| b.x86_64_level)
                        .map_or(0, u32::from),
                    binary_path: p
                        .binary
                        .as_ref()
                        .map(|b| b.path.clone())
                        .unwrap_or_default(),
                })
                .collect(),
            operator_bundle: info.operator_bundle,
            binaries_pending: info.binaries_pending,
        }))
    }
}

/// Connecting to the inspector Service, TLS handshake included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One inspection: longer than the inspector's own deadline (40 s, see
/// [`ServiceLimits`]), so its answer (or its error) arrives first.
const CALL_DEADLINE: Duration = Duration::from_secs(45);

/// A status's message and what caused it ("transport error" alone hides a refused
/// certificate or a refused connection).
fn with_causes(status: &Status) -> String {
    let mut text = status.message().to_owned();
    let mut cause = std::error::Error::source(status);
    while let Some(error) = cause {
        let next = error.to_string();
        if !text.contains(&next) {
            text = format!("{text}: {next}");
        }
        cause = error.source();
    }
    text
}

/// A remote inspector.
#[derive(Clone)]
pub struct RemoteInspector {
    client: InspectorClient<Channel>,
    health: HealthClient<Channel>,
}

impl RemoteInspector {
    /// Connects lazily: the first call opens the connection. Every call has a deadline:
    /// a hung inspector is an error, never a caller waiting forever. Plain HTTP/2: for
    /// an inspector on loopback or a trusted network; a cluster uses
    /// [`with_tls`](Self::with_tls).
    pub fn new(endpoint: &str) -> Result<Self, InspectError> {
        Self::connect(endpoint, None, CALL_DEADLINE)
    }

    /// [`new`](Self::new) with another deadline per call.
    pub fn with_deadline(endpoint: &str, deadline: Duration) -> Result<Self, InspectError> {
        Self::connect(endpoint, None, deadline)
    }

    /// Over mutual TLS: presents `tls`'s certificate and checks the inspector's against
    /// `tls`'s CAs and the endpoint's host name. The files are read for every new
    /// connection, so renewed certificates are used without a restart.
    pub fn with_tls(endpoint: &str, tls: TlsDir) -> Result<Self, InspectError> {
        Self::connect(endpoint, Some(tls), CALL_DEADLINE)
    }

    /// With `tls` or in plain HTTP/2, and `deadline` per call.
    pub fn connect(
        endpoint: &str,
        tls: Option<TlsDir>,
        deadline: Duration,
    ) -> Result<Self, InspectError> {
        // tonic refuses an `https` URI unless it does TLS itself; here the connector does
        // (with certificates it re-reads), so tonic is given the same address as `http`.
        let address = match (&tls, endpoint.strip_prefix("https://")) {
            (Some(_), Some(rest)) => format!("http://{rest}"),
            _ => endpoint.to_owned(),
        };
        let endpoint_config = Channel::from_shared(address)
            .map_err(|e| {
                InspectError::Service(format!("invalid inspector endpoint {endpoint:?}: {e}"))
            })?
            .connect_timeout(CONNECT_TIMEOUT.min(deadline))
            .timeout(deadline);
        let channel = match tls {
            Some(dir) => endpoint_config.connect_with_connector_lazy(MutualTlsConnector::new(
                dir,
                CONNECT_TIMEOUT.min(deadline),
            )),
            None => endpoint_config.connect_lazy(),
        };
        Ok(RemoteInspector {
            client: InspectorClient::new(channel.clone()),
            health: HealthClient::new(channel),
        })
    }

    /// Asks the inspector whether it serves (grpc.health.v1), over the connection the
    /// inspections use (its address, name resolution and TLS), within `deadline`. An
    /// inspector that answers without a health service (older than it) was reached.
    /// The error says why it was not.
    pub async fn probe(&self, deadline: Duration) -> Result<(), String> {
        let mut health = self.health.clone();
        let ask = health.check(HealthCheckRequest::default());
        match tokio::time::timeout(deadline, ask).await {
            Err(_) => Err(format!(
                "the image inspector did not answer within {deadline:?}"
            )),
            Ok(Ok(answer)) if answer.get_ref().status() == ServingStatus::Serving => Ok(()),
            Ok(Ok(answer)) => Err(format!(
                "the image inspector says it is {}",
                answer.get_ref().status().as_str_name()
            )),
            Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => Ok(()),
            Ok(Err(status)) => Err(format!(
                "cannot reach the image inspector: {}",
                with_causes(&status)
            )),
        }
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
                    format!(
                        "the image inspector service failed: {}",
                        with_causes(&status)
                    )
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
                    binary: (!p.binary_architecture.is_empty()).then(|| {
                        BinarySummary::new(
                            &p.binary_path,
                            &p.binary_architecture,
                            u8::try_from(p.binary_x86_64_level)
                                .ok()
                                .filter(|level| (1..=4).contains(level)),
                        )
                    }),
                    os: p.os,
                    architecture: p.architecture,
                    variant: Some(p.variant).filter(|v| !v.is_empty()),
                    digest: p.digest,
                })
                .collect(),
            operator_bundle: r.operator_bundle,
            binaries_pending: r.binaries_pending,
        }))
    }
}
