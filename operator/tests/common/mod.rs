//! The operator against the fake API server: a cluster with multiarch's CRDs and
//! `manifests/operator/` applied, a stand-in for kube-controller-manager that reports
//! Deployments and DaemonSets rolled out (unless told to hold some back), and the
//! operator started in-process.
#![allow(dead_code, clippy::unwrap_used)]

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use multiarch_fake_apiserver::FakeApiServer;
use multiarch_operator::{
    install::{self, Settings},
    metrics::OperatorMetrics,
    run::{OperatorOptions, Running, start},
};
use multiarch_runtime::supervisor::{Supervisor, SupervisorError};
use serde_json::{Value, json};

pub mod https;

pub const NS: &str = "multiarch";

pub fn client(server: &FakeApiServer) -> kube::Client {
    kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
}

/// A cluster as `kubectl apply -k manifests/` leaves it, with two nodes.
pub async fn cluster() -> FakeApiServer {
    let server = FakeApiServer::start().await;
    for crd in multiarch_crd::render::crds().unwrap() {
        server.apply(
            "apiextensions.k8s.io/customresourcedefinitions",
            serde_json::to_value(crd).unwrap(),
        );
    }
    for (_, documents) in install::folders()
        .unwrap()
        .into_iter()
        .find(|(name, _)| *name == "operator")
        .unwrap()
        .1
    {
        for document in documents {
            if let Some(resource) = resource_of(&document) {
                server.apply(&resource, document);
            }
        }
    }
    server.apply("nodes", node("amd-1", "amd64"));
    server.apply("nodes", node("arm-1", "arm64"));
    server
}

fn resource_of(document: &Value) -> Option<String> {
    Some(
        match document["kind"].as_str()? {
            "Namespace" => "namespaces",
            "ValidatingWebhookConfiguration" => {
                "admissionregistration.k8s.io/validatingwebhookconfigurations"
            }
            "ValidatingAdmissionPolicy" => {
                "admissionregistration.k8s.io/validatingadmissionpolicies"
            }
            "ValidatingAdmissionPolicyBinding" => {
                "admissionregistration.k8s.io/validatingadmissionpolicybindings"
            }
            // The operator's own Deployment, RBAC and Service matter to no test here.
            _ => return None,
        }
        .to_owned(),
    )
}

pub fn node(name: &str, arch: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch, "kubernetes.io/os": "linux"}}})
}

pub fn cppc(spec: Value) -> Value {
    json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
           "metadata": {"name": "cluster"}, "spec": spec})
}

/// Creates the ClusterPodPlacementConfig through the API, as a user would.
pub async fn create_cppc(server: &FakeApiServer, spec: Value) {
    let api: kube::Api<multiarch_crd::ClusterPodPlacementConfig> = kube::Api::all(client(server));
    api.create(
        &kube::api::PostParams::default(),
        &serde_json::from_value(cppc(spec)).unwrap(),
    )
    .await
    .unwrap();
}

/// Reports every Deployment and DaemonSet of multiarch's namespace rolled out, as
/// kube-controller-manager and the kubelets would, except those held back.
pub struct Rollouts {
    held: Arc<Mutex<BTreeSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Rollouts {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Rollouts {
    pub fn start(server: &Arc<FakeApiServer>) -> Rollouts {
        let held: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let (server, names) = (server.clone(), held.clone());
        let task = tokio::spawn(async move {
            loop {
                let held = names.lock().unwrap().clone();
                for deployment in server.list("apps/deployments") {
                    let name = deployment["metadata"]["name"].as_str().unwrap().to_owned();
                    let generation = deployment["metadata"]["generation"].clone();
                    let replicas = deployment["spec"]["replicas"].as_i64().unwrap_or(1);
                    let available = if held.contains(&name) { 0 } else { replicas };
                    let status = json!({"observedGeneration": generation, "replicas": replicas,
                        "updatedReplicas": replicas, "readyReplicas": available, "availableReplicas": available,
                        "unavailableReplicas": replicas - available});
                    if deployment["status"] != status {
                        let mut updated = deployment.clone();
                        updated["status"] = status;
                        server.apply("apps/deployments", updated);
                    }
                }
                for daemon_set in server.list("apps/daemonsets") {
                    let status = json!({"observedGeneration": daemon_set["metadata"]["generation"],
                        "desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberMisscheduled": 0,
                        "numberReady": 2, "numberAvailable": 2, "updatedNumberScheduled": 2});
                    if daemon_set["status"] != status {
                        let mut updated = daemon_set.clone();
                        updated["status"] = status;
                        server.apply("apps/daemonsets", updated);
                    }
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        });
        Rollouts { held, task }
    }

    /// Keeps `name` with no available replica until released.
    pub fn hold(&self, name: &str) {
        self.held.lock().unwrap().insert(name.to_owned());
    }

    pub fn release(&self, name: &str) {
        self.held.lock().unwrap().remove(name);
    }
}

/// A running operator; stopped (SIGTERM-like) by [`Operator::stop`].
pub struct Operator {
    pub running: Running,
    pub metrics: OperatorMetrics,
    pub addr: std::net::SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
    done: tokio::task::JoinHandle<Result<(), SupervisorError>>,
}

pub fn settings() -> Settings {
    Settings {
        image: "registry.example.com/multiarch:1.2.3".into(),
        ..Settings::default()
    }
}

pub async fn start_operator(server: &FakeApiServer, drain_timeout: Duration) -> Operator {
    start_operator_with(server, drain_timeout, Duration::from_secs(1)).await
}

/// An operator whose removed routes settle for `route_settle`.
pub async fn start_operator_with(
    server: &FakeApiServer,
    drain_timeout: Duration,
    route_settle: Duration,
) -> Operator {
    let _ = multiarch_runtime::logging::init(multiarch_runtime::logging::LogFormat::Text, "warn");
    let supervisor = Supervisor::new(tokio_util::sync::CancellationToken::new());
    let tasks = supervisor.tasks();
    let shutdown = tasks.shutdown().clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics = OperatorMetrics::default();
    let running = start(
        client(server),
        OperatorOptions {
            settings: settings(),
            identity: "operator-test".into(),
            election: None,
            drain_timeout,
            route_settle,
            certificate_check: Duration::from_secs(2),
        },
        listener,
        prometheus_client::registry::Registry::default(),
        metrics.clone(),
        &tasks,
    );
    let done = tokio::spawn(async move { supervisor.wait(Duration::from_secs(30)).await });
    Operator {
        running,
        metrics,
        addr,
        shutdown,
        done,
    }
}

impl Operator {
    /// Stops it as SIGTERM would and waits until every task has ended, so nothing it
    /// started can still write after this returns (a test may then change what it left).
    pub async fn stop(self) {
        self.shutdown.cancel();
        let stopped = tokio::time::timeout(Duration::from_secs(40), self.done)
            .await
            .expect("the operator did not stop within 40 s")
            .unwrap();
        // A task that failed during the run is reported here too; only a drain that
        // left tasks running would make the tests race.
        assert!(
            !matches!(stopped, Err(SupervisorError::DrainTimeout { .. })),
            "{stopped:?}"
        );
    }

    /// Successful reconciles so far.
    pub fn passes(&self) -> u64 {
        self.metrics
            .reconciles
            .get_or_create(&multiarch_operator::metrics::ResultLabel { result: "ok" })
            .get()
    }
}

/// Waits (up to 20 s) until `check` holds.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn get(server: &FakeApiServer, resource: &str, name: &str) -> Option<Value> {
    let namespace = if matches!(
        resource,
        "admissionregistration.k8s.io/mutatingwebhookconfigurations"
            | "rbac.authorization.k8s.io/clusterroles"
            | "rbac.authorization.k8s.io/clusterrolebindings"
            | "multiarch.openshift.io/clusterpodplacementconfigs"
    ) {
        ""
    } else {
        NS
    };
    server.get(resource, namespace, name)
}

pub fn condition(server: &FakeApiServer, type_: &str) -> Option<Value> {
    let cppc = get(
        server,
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "cluster",
    )?;
    cppc["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

pub const MWC: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";

/// The path the webhook configuration routes to, if it exists.
pub fn route(server: &FakeApiServer) -> Option<String> {
    get(server, MWC, "multiarch-webhook").and_then(|m| {
        m["webhooks"][0]["clientConfig"]["service"]["path"]
            .as_str()
            .map(str::to_owned)
    })
}

/// Requests that wrote (anything but GET), leases aside.
pub fn writes(server: &FakeApiServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .filter(|r| !r.starts_with("GET ") && !r.contains("/leases"))
        .collect()
}

/// A pending pod naming `scheduler`.
pub fn pending_pod(namespace: &str, name: &str, scheduler: &str, owner: Option<&str>) -> Value {
    let mut pod = json!({"metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {"schedulerName": scheduler, "containers": [{"name": "app", "image": "quay.io/shop/web:1"}]},
        "status": {"phase": "Pending"}});
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": owner, "uid": format!("uid-{owner}"), "controller": true}]);
    }
    pod
}

/// A pod gated by multiarch's webhook.
pub fn gated_pod(namespace: &str, name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": namespace,
                        "labels": {"multiarch.openshift.io/scheduling-gate": "gated"}},
        "spec": {"schedulerName": "default-scheduler",
                 "schedulingGates": [{"name": "multiarch.openshift.io/scheduling-gate"}],
                 "containers": [{"name": "app", "image": "quay.io/shop/web:1"}]},
        "status": {"phase": "Pending"}})
}

/// An operator that has installed `spec` and routes pods.
pub async fn installed(
    server: &Arc<FakeApiServer>,
    spec: Value,
    drain: Duration,
) -> (Rollouts, Operator) {
    installed_with(server, spec, drain, Duration::from_secs(1)).await
}

/// The same, with removed routes settling for `route_settle`.
pub async fn installed_with(
    server: &Arc<FakeApiServer>,
    spec: Value,
    drain: Duration,
    route_settle: Duration,
) -> (Rollouts, Operator) {
    let rollouts = Rollouts::start(server);
    let operator = start_operator_with(server, drain, route_settle).await;
    create_cppc(server, spec).await;
    eventually("Available", || {
        condition(server, "Available").is_some_and(|c| c["status"] == "True")
    })
    .await;
    (rollouts, operator)
}

/// Patches the ClusterPodPlacementConfig's spec, as a user would.
pub async fn patch_spec(server: &FakeApiServer, spec: Value) {
    kube::Api::<multiarch_crd::ClusterPodPlacementConfig>::all(client(server))
        .patch(
            "cluster",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap();
}

/// Waits until the uninstall has released the ClusterPodPlacementConfig's finalizer.
pub async fn cppc_gone(server: &FakeApiServer) {
    eventually("the ClusterPodPlacementConfig gone", || {
        get(
            server,
            "multiarch.openshift.io/clusterpodplacementconfigs",
            "cluster",
        )
        .is_none()
    })
    .await;
}

pub fn pods(server: &FakeApiServer) -> Vec<Value> {
    server.list("pods")
}

pub fn waiting_for_scheduler(server: &FakeApiServer) -> Vec<String> {
    pods(server)
        .iter()
        .filter(|p| {
            p["spec"]["schedulerName"] == "multiarch-scheduler"
                && p["spec"]["nodeName"].is_null()
                && p["metadata"]["deletionTimestamp"].is_null()
        })
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

pub fn gated(server: &FakeApiServer) -> Vec<String> {
    pods(server)
        .iter()
        .filter(|p| {
            p["spec"]["schedulingGates"].as_array().is_some_and(|g| {
                g.iter()
                    .any(|g| g["name"] == "multiarch.openshift.io/scheduling-gate")
            })
        })
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}
