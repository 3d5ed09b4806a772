//! `multiarch operator`.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use multiarch_runtime::{
    logging::LogArgs,
    role_args::{ClientArgs, LeaseArgs, OpsArgs, duration_flag},
};
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct OperatorArgs {
    #[command(flatten)]
    #[serde(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub lease: LeaseArgs,

    /// multiarch's namespace: the operands, the Leases and the certificates live there.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// HTTPS listen address of the webhooks it serves (CRD conversion, validation).
    #[arg(
        long,
        default_value = "0.0.0.0:9443",
        env = "MULTIARCH_OPERATOR_LISTEN"
    )]
    pub listen: SocketAddr,

    #[command(flatten)]
    #[serde(flatten)]
    pub ops: OpsArgs,

    /// The image every operand runs [default: the operator's own, read from its pod].
    #[arg(long, env = "MULTIARCH_OPERAND_IMAGE")]
    pub operand_image: Option<String>,

    /// imagePullPolicy of the operands' containers.
    #[arg(long, value_parser = ["Always", "IfNotPresent", "Never"], env = "MULTIARCH_OPERAND_IMAGE_PULL_POLICY")]
    pub operand_image_pull_policy: Option<String>,

    /// Pull secrets (in multiarch's namespace) for the operand image.
    #[arg(
        long,
        value_delimiter = ',',
        env = "MULTIARCH_OPERAND_IMAGE_PULL_SECRETS"
    )]
    pub operand_image_pull_secrets: Vec<String>,

    /// Replicas of each operand Deployment.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(i32).range(1..=16), env = "MULTIARCH_OPERAND_REPLICAS")]
    pub operand_replicas: i32,

    #[arg(long, default_value = "100m", env = "MULTIARCH_OPERAND_CPU_REQUEST")]
    pub operand_cpu_request: String,

    #[arg(
        long,
        default_value = "128Mi",
        env = "MULTIARCH_OPERAND_MEMORY_REQUEST"
    )]
    pub operand_memory_request: String,

    #[arg(long, default_value = "512Mi", env = "MULTIARCH_OPERAND_MEMORY_LIMIT")]
    pub operand_memory_limit: String,

    /// Node labels the operands' pods require, as key=value (repeat or comma-separate).
    #[arg(long, value_delimiter = ',', env = "MULTIARCH_OPERAND_NODE_SELECTOR")]
    pub operand_node_selector: Vec<String>,

    /// Tolerations of the operands' pods, as a JSON list of Kubernetes tolerations.
    #[arg(long, env = "MULTIARCH_OPERAND_TOLERATIONS")]
    pub operand_tolerations: Option<String>,

    /// Where the API server calls the webhooks from (CIDRs, comma-separated): the
    /// NetworkPolicies admit only these to the webhook ports [default: from anywhere].
    #[arg(long, value_delimiter = ',', env = "MULTIARCH_API_SERVER_CIDRS")]
    pub api_server_cidrs: Vec<String>,

    /// A ConfigMap in multiarch's namespace whose `ca.crt` is the CA of the client
    /// certificate the API server presents to webhooks (set in its admission
    /// configuration): the webhook then answers only that certificate's holder, and uses
    /// pods' pull secrets at admission.
    #[arg(
        long,
        value_name = "NAME",
        env = "MULTIARCH_API_SERVER_CLIENT_CA_CONFIG_MAP"
    )]
    pub api_server_client_ca_config_map: Option<String>,

    /// Give the exec-format-error daemon CAP_SYS_RESOURCE, which only nodes with kernels
    /// before 5.11 need (they charge eBPF maps to RLIMIT_MEMLOCK).
    #[arg(long, env = "MULTIARCH_ENOEXEC_DAEMON_SYS_RESOURCE")]
    pub enoexec_daemon_sys_resource: bool,

    /// The nodes' CRI socket, as a host path, for runtimes whose socket is not one of
    /// containerd's, CRI-O's or k3s's under /run (the daemon maps processes to pods
    /// through it) [default: found under the host's /run].
    #[arg(
        long,
        value_name = "PATH",
        env = "MULTIARCH_ENOEXEC_DAEMON_RUNTIME_SOCKET"
    )]
    pub enoexec_daemon_runtime_socket: Option<PathBuf>,

    /// The nodes' pod log directory, as a host path: the kubelet's `podLogsDir`. The
    /// daemon reads a container's log there (read-only, its last 16 KiB) when the container
    /// exits with 127, to tell glibc's loader refusing the CPU from other failures.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/var/log/pods",
        env = "MULTIARCH_ENOEXEC_DAEMON_POD_LOGS_DIR"
    )]
    pub enoexec_daemon_pod_logs_dir: PathBuf,

    /// How long pods (and exec-format-error reports) may wait for a component that is
    /// being removed (uninstall, mode switch) before the operator releases them itself.
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,

    /// How long the components serving a removed route (uninstall, a mode switch away
    /// from the scheduler) stay after the operator sees the route gone: longer than an
    /// admission review may take (the webhook's 10 s timeout) plus the API servers' delay
    /// in seeing the change. Pods still routed meanwhile are placed or released.
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub route_settle: Duration,

    /// How often the certificates are checked (they are renewed months before expiry).
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub certificate_check: Duration,

    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
}

role_flags!(OperatorArgs, "operator");
