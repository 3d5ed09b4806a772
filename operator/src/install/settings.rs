//! What every operand is installed with: namespace, image, replicas, resources and where
//! its pods may run. `manifests/` is generated with the defaults; the operator takes them
//! from its flags.

use std::{collections::BTreeMap, path::PathBuf};

use multiarch_flags::OperatorArgs;
use serde_json::{Value, json};

use super::{IMAGE, NAMESPACE};

/// The CPU architectures the multiarch image is built for: every operand may run on any.
/// Where kubelets write pod logs unless their `podLogsDir` says otherwise.
pub const POD_LOGS_DIR: &str = "/var/log/pods";

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
    /// The nodes' pod log directory (a host path, the kubelet's `podLogsDir`), mounted
    /// read-only into the exec-format-error daemon at the same path.
    pub enoexec_daemon_pod_logs_dir: PathBuf,
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
            enoexec_daemon_pod_logs_dir: PathBuf::from(POD_LOGS_DIR),
        }
    }
}

/// An operator flag that does not read as a setting.
#[derive(Debug, thiserror::Error)]
pub enum OperatorFlagsError {
    #[error("--operand-node-selector {0:?}: expected key=value")]
    NodeSelector(String),
    #[error("--operand-tolerations: expected a JSON list of tolerations: {0}")]
    Tolerations(serde_json::Error),
}

impl Settings {
    /// The settings the operator's flags give, its operands running `image`.
    pub fn from_flags(flags: &OperatorArgs, image: String) -> Result<Settings, OperatorFlagsError> {
        let mut node_selector = BTreeMap::new();
        for pair in &flags.operand_node_selector {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| OperatorFlagsError::NodeSelector(pair.clone()))?;
            node_selector.insert(key.trim().to_owned(), value.trim().to_owned());
        }
        let tolerations: Vec<Value> = match &flags.operand_tolerations {
            Some(text) => serde_json::from_str(text).map_err(OperatorFlagsError::Tolerations)?,
            None => Vec::new(),
        };
        Ok(Settings {
            namespace: flags.namespace.clone(),
            image,
            image_pull_policy: flags.operand_image_pull_policy.clone(),
            image_pull_secrets: flags.operand_image_pull_secrets.clone(),
            replicas: flags.operand_replicas,
            cpu_request: flags.operand_cpu_request.clone(),
            memory_request: flags.operand_memory_request.clone(),
            memory_limit: flags.operand_memory_limit.clone(),
            node_selector,
            tolerations,
            api_server_cidrs: flags.api_server_cidrs.clone(),
            api_server_client_ca_config_map: flags.api_server_client_ca_config_map.clone(),
            enoexec_daemon_sys_resource: flags.enoexec_daemon_sys_resource,
            enoexec_daemon_runtime_socket: flags.enoexec_daemon_runtime_socket.clone(),
            enoexec_daemon_pod_logs_dir: flags.enoexec_daemon_pod_logs_dir.clone(),
        })
    }

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

#[cfg(test)]
mod tests {
    use multiarch_flags::parse_argv;

    use super::*;

    fn flags(argv: &[&str]) -> OperatorArgs {
        parse_argv(&[&["operator"], argv].concat()).unwrap()
    }

    #[test]
    fn the_operators_defaults_are_the_manifests_settings() {
        let settings = Settings::from_flags(&flags(&[]), IMAGE.into()).unwrap();
        assert_eq!(settings, Settings::default());
    }

    #[test]
    fn the_flags_become_settings_and_bad_ones_are_named() {
        let settings = Settings::from_flags(
            &flags(&[
                "--namespace=ops",
                "--operand-node-selector=zone = a,disk=ssd",
                r#"--operand-tolerations=[{"operator":"Exists"}]"#,
                "--operand-replicas=3",
            ]),
            "img".into(),
        )
        .unwrap();
        assert_eq!(settings.namespace, "ops");
        assert_eq!(settings.image, "img");
        assert_eq!(settings.replicas, 3);
        assert_eq!(
            settings.node_selector,
            BTreeMap::from([("zone".into(), "a".into()), ("disk".into(), "ssd".into())])
        );
        assert_eq!(settings.tolerations, [json!({"operator": "Exists"})]);
        let selector = Settings::from_flags(&flags(&["--operand-node-selector=zone"]), "i".into());
        assert!(matches!(selector, Err(OperatorFlagsError::NodeSelector(p)) if p == "zone"));
        let tolerations = Settings::from_flags(&flags(&["--operand-tolerations={"]), "i".into());
        assert!(matches!(
            tolerations,
            Err(OperatorFlagsError::Tolerations(_))
        ));
    }
}
