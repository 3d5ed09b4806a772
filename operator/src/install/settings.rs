//! What every operand is installed with: namespace, image, replicas, resources and where
//! its pods may run. `manifests/` is generated with the defaults; the operator takes them
//! from its flags.

use std::{collections::BTreeMap, path::PathBuf};

use serde_json::{Value, json};

use super::{IMAGE, NAMESPACE};

/// The CPU architectures the multiarch image is built for: every operand may run on any.
pub const IMAGE_ARCHITECTURES: [&str; 4] = ["amd64", "arm64", "ppc64le", "s390x"];

#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Where the operands live (never routed or gated).
    pub namespace: String,
    /// The multiarch image every operand runs.
    pub image: String,
    /// `imagePullPolicy` of the operands' containers (the cluster's default when unset).
    pub image_pull_policy: Option<String>,
    /// Pull secrets (in `namespace`) for the image.
    pub image_pull_secrets: Vec<String>,
    /// Replicas of each Deployment (the scheduler, the webhook, the inspector, the gate
    /// controller, the exec-format-error handler).
    pub replicas: i32,
    pub cpu_request: String,
    pub memory_request: String,
    pub memory_limit: String,
    /// Extra node labels the operands' pods require (the DaemonSet excepted: it runs on
    /// every node).
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the operands' pods (the DaemonSet tolerates every taint anyway).
    pub tolerations: Vec<Value>,
    /// Where the API server calls the webhooks from. The NetworkPolicies let only these
    /// reach the webhook ports; empty: from anywhere (an API server's address is not a
    /// pod, so it cannot be selected otherwise).
    pub api_server_cidrs: Vec<String>,
    /// A ConfigMap in multiarch's namespace whose `ca.crt` holds the CA of the client
    /// certificate the API server presents to webhooks (its admission configuration's
    /// kubeconfig): the webhook then refuses every other caller at the handshake, and
    /// uses pods' pull secrets at admission.
    pub api_server_client_ca_config_map: Option<String>,
    /// Give the exec-format-error daemon CAP_SYS_RESOURCE: only kernels before 5.11 need
    /// it (they charge eBPF maps to RLIMIT_MEMLOCK), and some hosts cannot grant it.
    pub enoexec_daemon_sys_resource: bool,
    /// The nodes' CRI socket (a host path) when it is not found under the host's /run.
    pub enoexec_daemon_runtime_socket: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: NAMESPACE.to_owned(),
            image: IMAGE.to_owned(),
            image_pull_policy: None,
            image_pull_secrets: Vec::new(),
            replicas: 2,
            cpu_request: "100m".into(),
            memory_request: "128Mi".into(),
            memory_limit: "512Mi".into(),
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            api_server_cidrs: Vec::new(),
            api_server_client_ca_config_map: None,
            enoexec_daemon_sys_resource: false,
            enoexec_daemon_runtime_socket: None,
        }
    }
}

impl Settings {
    /// `http://<service>.<namespace>.svc:<port>`.
    pub fn service_url(&self, service: &str, port: u16) -> String {
        format!("http://{service}.{}.svc:{port}", self.namespace)
    }

    /// The required node affinity of every operand: a node of an architecture the image
    /// has a build for, running Linux, with the extra labels of `node_selector`.
    pub fn node_affinity(&self) -> Value {
        let mut expressions = vec![
            json!({"key": "kubernetes.io/arch", "operator": "In", "values": IMAGE_ARCHITECTURES}),
            json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}),
        ];
        for (key, value) in &self.node_selector {
            expressions.push(json!({"key": key, "operator": "In", "values": [value]}));
        }
        json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}})
    }

    pub fn resources(&self) -> Value {
        json!({
            "requests": {"cpu": self.cpu_request, "memory": self.memory_request},
            "limits": {"memory": self.memory_limit},
        })
    }
}
