//! The container runtime's view of a container, over the CRI `runtime.v1` API on its unix
//! socket. Works the same with containerd and CRI-O: the kubelet labels every container with
//! its pod, and both runtimes return those labels in `ContainerStatus`.

use std::{path::PathBuf, time::Duration};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The generated CRI client and server (the server is used by tests as a fake runtime).
pub mod proto {
    #![allow(clippy::all, clippy::unwrap_used, clippy::too_many_lines)]
    tonic::include_proto!("runtime.v1");
}

use proto::runtime_service_client::RuntimeServiceClient;

/// Labels the kubelet puts on every container it creates.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

/// A Kubernetes container as the runtime describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerInfo {
    /// `<runtime>://<id>`, as in the pod's `status.containerStatuses[].containerID`.
    pub container_id: String,
    pub container_name: String,
    pub pod_name: String,
    pub pod_namespace: String,
    pub pod_uid: String,
    pub image: String,
    /// The container's log on the host (CRI format), when the runtime says.
    pub log_path: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("cannot reach the container runtime at {socket}")]
    Connect {
        socket: PathBuf,
        source: tonic::transport::Error,
    },
    // Not a `source`: logged with Display at run time, where the status is the useful part.
    #[error("container runtime: {0}")]
    Rpc(tonic::Status),
    #[error("container {0} is not known to the runtime")]
    NotFound(String),
    #[error("container {id} has no {label} label: not created by a kubelet")]
    NotKubernetes { id: String, label: &'static str },
}

/// Looks containers up by ID; implemented by [`CriClient`] and by test doubles.
pub trait ContainerDirectory {
    fn container(
        &self,
        id: &str,
    ) -> impl std::future::Future<Output = Result<ContainerInfo, CriError>> + Send;
}

/// A CRI client on the runtime's unix socket.
#[derive(Clone)]
pub struct CriClient {
    client: RuntimeServiceClient<Channel>,
    runtime_name: String,
}

impl CriClient {
    /// Connects to the socket (containerd: `/run/containerd/containerd.sock`, CRI-O:
    /// `/var/run/crio/crio.sock`) and asks the runtime its name, which prefixes container IDs.
    pub async fn connect(socket: impl Into<PathBuf>, timeout: Duration) -> Result<Self, CriError> {
        let socket = socket.into();
        let path = socket.clone();
        // The URI is required by tonic but unused: the connector always dials the socket.
        let channel = Endpoint::from_static("http://cri.invalid")
            .connect_timeout(timeout)
            .timeout(timeout)
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    tokio::net::UnixStream::connect(path)
                        .await
                        .map(TokioIo::new)
                }
            }))
            .await
            .map_err(|source| CriError::Connect {
                socket: socket.clone(),
                source,
            })?;
        let mut client = RuntimeServiceClient::new(channel);
        let version = client
            .version(proto::VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(CriError::Rpc)?
            .into_inner();
        tracing::info!(
            socket = %socket.display(),
            runtime = %version.runtime_name,
            version = %version.runtime_version,
            api = %version.runtime_api_version,
            "connected to the container runtime"
        );
        Ok(Self {
            client,
            runtime_name: version.runtime_name,
        })
    }

    /// The runtime's name: `containerd` or `cri-o`.
    pub fn runtime_name(&self) -> &str {
        &self.runtime_name
    }
}

impl ContainerDirectory for CriClient {
    async fn container(&self, id: &str) -> Result<ContainerInfo, CriError> {
        let response = self
            .client
            .clone()
            .container_status(proto::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await
            .map_err(|status| match status.code() {
                tonic::Code::NotFound => CriError::NotFound(id.into()),
                _ => CriError::Rpc(status),
            })?
            .into_inner();
        let status = response
            .status
            .ok_or_else(|| CriError::NotFound(id.into()))?;
        let label = |label: &'static str| {
            status
                .labels
                .get(label)
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| CriError::NotKubernetes {
                    id: id.into(),
                    label,
                })
        };
        Ok(ContainerInfo {
            container_id: format!("{}://{id}", self.runtime_name),
            container_name: label(CONTAINER_NAME_LABEL)?,
            pod_name: label(POD_NAME_LABEL)?,
            pod_namespace: label(POD_NAMESPACE_LABEL)?,
            pod_uid: label(POD_UID_LABEL)?,
            image: status.image.map(|i| i.image).unwrap_or_default(),
            log_path: Some(status.log_path).filter(|p| !p.is_empty()),
        })
    }
}
