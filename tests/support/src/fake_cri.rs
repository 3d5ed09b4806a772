//! A container runtime that answers the CRI `runtime.v1` calls the exec-format-error daemon
//! makes, on a unix socket, from a table of containers (as containerd and CRI-O would after
//! the kubelet created them). Counts `ContainerStatus` calls.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
};

use multiarch_ebpf::cri::proto::{
    self,
    runtime_service_server::{RuntimeService, RuntimeServiceServer},
};
use tonic::{Request, Response, Status};

/// One container as the kubelet created it.
#[derive(Clone)]
pub struct FakeContainer {
    pub id: String,
    pub name: String,
    pub pod: String,
    pub namespace: String,
    pub pod_uid: String,
    pub image: String,
    /// False for a container the kubelet did not create (no pod labels).
    pub kubernetes: bool,
}

#[derive(Clone)]
struct Runtime {
    name: &'static str,
    containers: Arc<Mutex<HashMap<String, FakeContainer>>>,
    /// Container ID -> the log path `ContainerStatus` gives.
    log_paths: Arc<Mutex<HashMap<String, String>>>,
    status_calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl RuntimeService for Runtime {
    async fn version(
        &self,
        _: Request<proto::VersionRequest>,
    ) -> Result<Response<proto::VersionResponse>, Status> {
        Ok(Response::new(proto::VersionResponse {
            version: "0.1.0".into(),
            runtime_name: self.name.into(),
            runtime_version: "2.1.0".into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn container_status(
        &self,
        request: Request<proto::ContainerStatusRequest>,
    ) -> Result<Response<proto::ContainerStatusResponse>, Status> {
        self.status_calls.fetch_add(1, Ordering::SeqCst);
        let id = request.into_inner().container_id;
        let containers = self.containers.lock().unwrap();
        let Some(c) = containers.get(&id) else {
            // containerd's and CRI-O's answer for an unknown ID.
            return Err(Status::not_found(format!(
                "an error occurred when try to find container \"{id}\": not found"
            )));
        };
        let labels = if c.kubernetes {
            HashMap::from([
                ("io.kubernetes.pod.name".to_owned(), c.pod.clone()),
                (
                    "io.kubernetes.pod.namespace".to_owned(),
                    c.namespace.clone(),
                ),
                ("io.kubernetes.pod.uid".to_owned(), c.pod_uid.clone()),
                ("io.kubernetes.container.name".to_owned(), c.name.clone()),
            ])
        } else {
            HashMap::new()
        };
        Ok(Response::new(proto::ContainerStatusResponse {
            status: Some(proto::ContainerStatus {
                id: c.id.clone(),
                metadata: Some(proto::ContainerMetadata {
                    name: c.name.clone(),
                    attempt: 0,
                }),
                state: proto::ContainerState::ContainerExited as i32,
                exit_code: 1,
                image: Some(proto::ImageSpec {
                    image: c.image.clone(),
                    annotations: HashMap::new(),
                }),
                image_ref: format!("{}@sha256:{}", c.image, "0".repeat(64)),
                reason: "Error".into(),
                labels,
                log_path: self
                    .log_paths
                    .lock()
                    .unwrap()
                    .get(&c.id)
                    .cloned()
                    .unwrap_or_default(),
                ..Default::default()
            }),
            info: HashMap::new(),
        }))
    }
}

/// A running fake runtime; stops when dropped.
pub struct FakeCri {
    pub socket: PathBuf,
    containers: Arc<Mutex<HashMap<String, FakeContainer>>>,
    log_paths: Arc<Mutex<HashMap<String, String>>>,
    status_calls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for FakeCri {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeCri {
    /// Serves as `runtime_name` ("containerd" or "cri-o").
    pub async fn start(runtime_name: &'static str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("cri.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let containers = Arc::new(Mutex::new(HashMap::new()));
        let log_paths = Arc::new(Mutex::new(HashMap::new()));
        let status_calls = Arc::new(AtomicUsize::new(0));
        let runtime = Runtime {
            name: runtime_name,
            containers: containers.clone(),
            log_paths: log_paths.clone(),
            status_calls: status_calls.clone(),
        };
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(RuntimeServiceServer::new(runtime))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
                .await
                .unwrap();
        });
        Self {
            socket,
            containers,
            log_paths,
            status_calls,
            task,
            _dir: dir,
        }
    }

    pub fn add(&self, container: FakeContainer) {
        self.containers
            .lock()
            .unwrap()
            .insert(container.id.clone(), container);
    }

    /// The log path `ContainerStatus` gives for container `id` (none until set).
    pub fn set_log_path(&self, id: &str, path: &Path) {
        self.log_paths
            .lock()
            .unwrap()
            .insert(id.to_owned(), path.to_string_lossy().into_owned());
    }

    pub fn status_calls(&self) -> usize {
        self.status_calls.load(Ordering::SeqCst)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }
}
