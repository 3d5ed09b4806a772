//! What the tier runs against, from the environment `scripts/e2e` sets: the cluster (a
//! kubeconfig and kubectl), the multiarch image under test, the test images, and where
//! the inspector's pods reach the registry.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use serde_json::{Value, json};

use crate::{
    kubectl::Kubectl,
    wait::{self, Check},
};

/// The test images: `<prefix>:multi` (an index of linux/amd64 and linux/arm64),
/// `<prefix>:<arch>` (one manifest), `<prefix>:<arch>-only` (an index of one platform);
/// what the kit's `images up` pushes as `$REGISTRY/test/busybox`.
#[derive(Clone, Debug)]
pub struct TestImages {
    pub prefix: String,
}

/// The media types a registry is asked for when a test reads one image manifest.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

impl TestImages {
    /// The registry the test images are in (`host:port`) and their repository.
    pub fn registry_and_repository(&self) -> anyhow::Result<(&str, &str)> {
        self.prefix
            .split_once('/')
            .context("the test images' prefix names no registry")
    }

    /// Runs on amd64 and arm64 nodes.
    pub fn multi(&self) -> String {
        format!("{}:multi", self.prefix)
    }

    /// A single manifest for `arch`: on another node it is pulled, then fails with
    /// `exec format error`.
    pub fn single(&self, arch: &str) -> String {
        format!("{}:{arch}", self.prefix)
    }

    /// An index that lists only `arch`.
    pub fn only(&self, arch: &str) -> String {
        format!("{}:{arch}-only", self.prefix)
    }
}

pub struct Tier {
    pub kubectl: Kubectl,
    /// The checkout: `manifests/` and `README.md`.
    pub repo: PathBuf,
    /// Where the README's commands run (their files go there, not into the checkout).
    pub work: PathBuf,
    /// The multiarch image under test.
    pub image: String,
    /// The node image (the daemon alone), when it was built.
    pub node_image: Option<String>,
    pub test_images: TestImages,
    /// Registry settings for the inspector's ConfigMap, when its pods need any (the kit:
    /// the registry the node pulls from at 127.0.0.1 is another address for pods).
    pub registries_config: Option<PathBuf>,
    /// The nodes' container runtime socket, when the operator must be told it.
    pub runtime_socket: Option<String>,
    /// The nodes' pod log directory (the kubelet's podLogsDir), when it is not
    /// /var/log/pods.
    pub pod_logs_dir: Option<String>,
    /// This pass installs prometheus-operator's ServiceMonitor CRD first.
    pub service_monitors: bool,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Tier {
    /// The tier as `scripts/e2e` describes it; `None` when no cluster is given.
    pub fn from_env(service_monitors: bool) -> anyhow::Result<Option<Tier>> {
        let Some(kubeconfig) = var("MULTIARCH_E2E_KUBECONFIG") else {
            return Ok(None);
        };
        let need = |name: &str| {
            var(name).with_context(|| format!("{name} is not set (scripts/e2e sets it)"))
        };
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let repo = repo.canonicalize().context("the checkout")?;
        let work = PathBuf::from(need("MULTIARCH_E2E_WORK")?);
        std::fs::create_dir_all(&work)?;
        Ok(Some(Tier {
            kubectl: Kubectl {
                bin: PathBuf::from(
                    var("MULTIARCH_E2E_KUBECTL").unwrap_or_else(|| "kubectl".into()),
                ),
                kubeconfig: PathBuf::from(kubeconfig),
            },
            repo,
            work,
            image: need("MULTIARCH_E2E_IMAGE")?,
            node_image: var("MULTIARCH_E2E_NODE_IMAGE"),
            test_images: TestImages {
                prefix: need("MULTIARCH_E2E_TEST_IMAGES")?,
            },
            registries_config: var("MULTIARCH_E2E_REGISTRIES_CONFIG").map(PathBuf::from),
            runtime_socket: var("MULTIARCH_E2E_RUNTIME_SOCKET"),
            pod_logs_dir: var("MULTIARCH_E2E_POD_LOGS_DIR"),
            service_monitors,
        }))
    }

    /// The nodes' architectures, sorted.
    pub fn node_architectures(&self) -> anyhow::Result<Vec<String>> {
        let mut archs: Vec<String> = self
            .kubectl
            .items(&["nodes"])?
            .iter()
            .filter_map(|n| {
                n["metadata"]["labels"]["kubernetes.io/arch"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        archs.sort();
        archs.dedup();
        Ok(archs)
    }

    /// A node to pin pods to, and its architecture.
    pub fn a_node(&self) -> anyhow::Result<(String, String)> {
        let nodes = self.kubectl.items(&["nodes"])?;
        let node = nodes.first().context("the cluster has no node")?;
        Ok((
            node["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            node["metadata"]["labels"]["kubernetes.io/arch"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        ))
    }

    /// Of the test images' architectures (amd64, arm64), one no node has.
    pub fn foreign_architecture(&self) -> anyhow::Result<String> {
        let archs = self.node_architectures()?;
        ["arm64", "amd64"]
            .into_iter()
            .find(|a| !archs.iter().any(|n| n == a))
            .map(str::to_owned)
            .with_context(|| {
                format!("every test image architecture has nodes ({archs:?}): no foreign one")
            })
    }

    /// A Node object without a kubelet (it runs nothing and turns NotReady), named and
    /// labelled as given (`kubernetes.io/os: linux` and its hostname added), with room
    /// for 4 CPUs, 8 GiB and 110 pods.
    pub fn add_node_object(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        let capacity = json!({"cpu": "4", "memory": "8Gi", "pods": "110"});
        self.add_node_object_with(name, labels, json!({}), capacity)
    }

    /// [`Tier::add_node_object`] with the Node's `spec` (taints) and its capacity.
    pub fn add_node_object_with(
        &self,
        name: &str,
        mut labels: Value,
        spec: Value,
        capacity: Value,
    ) -> anyhow::Result<()> {
        labels["kubernetes.io/os"] = json!("linux");
        labels["kubernetes.io/hostname"] = json!(name);
        self.kubectl.apply(
            &json!({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": labels}, "spec": spec})
            .to_string(),
        )?;
        self.kubectl.run(&[
            "patch",
            "node",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {"capacity": capacity, "allocatable": capacity}}).to_string(),
        ])?;
        Ok(())
    }

    /// A fresh namespace `name` (deleted first if a failed run left it), labelled.
    pub fn namespace(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        self.delete_namespace(name)?;
        self.kubectl.apply(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
                .to_string(),
        )?;
        Ok(())
    }

    /// Deletes `name` and waits until it is gone.
    pub fn delete_namespace(&self, name: &str) -> anyhow::Result<()> {
        self.kubectl.run(&[
            "delete",
            "namespace",
            name,
            "--ignore-not-found",
            "--wait=false",
        ])?;
        wait::until(
            &format!("namespace {name} deleted"),
            Duration::from_secs(180),
            || {
                Ok(match self.kubectl.get_opt(&["namespace", name])? {
                    None => Check::Done(()),
                    Some(_) => Check::NotYet("still there".into()),
                })
            },
        )
    }

    /// The ClusterPodPlacementConfig `cluster`.
    pub fn cppc(&self) -> anyhow::Result<Value> {
        self.kubectl.json(&[
            "get",
            "clusterpodplacementconfigs.v1beta1.multiarch.openshift.io",
            "cluster",
        ])
    }

    /// Waits until the ClusterPodPlacementConfig routes `routing` and is Available for
    /// its current generation.
    pub fn wait_routing(&self, routing: &str, deadline: Duration) -> anyhow::Result<()> {
        wait::until_true(
            &format!("the ClusterPodPlacementConfig routing {routing}"),
            deadline,
            || {
                let cppc = self.cppc()?;
                let status = &cppc["status"];
                let available = condition(status, "Available");
                let current = status["observedGeneration"] == cppc["metadata"]["generation"];
                Ok((
                    status["routing"] == routing && available == "True" && current,
                    format!(
                        "routing {}, Available {available}, generation observed {}",
                        status["routing"], current
                    ),
                ))
            },
        )
    }
}

/// The status of condition `type_` ("" when absent).
pub fn condition(status: &Value, type_: &str) -> String {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
        .to_owned()
}
