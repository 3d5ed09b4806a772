//! Flags of the roles that run in a cluster.

#[cfg(feature = "cluster-role")]
#[allow(unused_imports)] // a build with only some roles reads only some of them
use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[cfg(feature = "leader-elected")]
use multiarch_runtime::role_args::LeaseArgs;
#[cfg(feature = "cluster-role")]
#[allow(unused_imports)] // the scheduler listens on its own default port
use multiarch_runtime::role_args::OpsArgs;
#[cfg(feature = "cluster-role")]
use multiarch_runtime::{logging::LogArgs, role_args::ClientArgs};

#[cfg(feature = "scheduler")]
#[derive(Debug, clap::Args)]
pub struct SchedulerArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// The schedulerName of the pods this scheduler places.
    #[arg(
        long,
        default_value = "multiarch-scheduler",
        env = "MULTIARCH_SCHEDULER_NAME"
    )]
    pub scheduler_name: String,

    /// Namespace of the leader-election Lease (multiarch's own).
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// The Lease name; defaults to the scheduler name (never kube-scheduler's).
    #[arg(long)]
    pub lease_name: Option<String>,

    /// This replica's identity in the Lease and events; defaults to the pod name plus a suffix.
    #[arg(long, env = "MULTIARCH_IDENTITY")]
    pub identity: Option<String>,

    /// Concurrent pods/binding calls.
    #[arg(long, default_value_t = 16)]
    pub bind_concurrency: usize,

    /// Requests per second for per-pod writes (bindings, events, status); 0: unlimited.
    #[arg(long, default_value_t = 50.0, env = "MULTIARCH_KUBE_API_QPS")]
    pub kube_api_qps: f64,

    /// Requests that may go at once above the QPS.
    #[arg(long, default_value_t = 100, env = "MULTIARCH_KUBE_API_BURST")]
    pub kube_api_burst: u32,

    /// How long a pod's PersistentVolumeClaims may take to be bound (or provisioned)
    /// after the scheduler chose their volumes or node, before its binding fails and it
    /// is retried (kube-scheduler's `bindTimeoutSeconds`).
    #[arg(long, default_value = "600s", value_parser = humantime::parse_duration)]
    pub volume_bind_timeout: Duration,

    /// Use a remote inspector (`multiarch inspector`) instead of inspecting in-process.
    #[arg(long, env = "MULTIARCH_INSPECTOR_ENDPOINT")]
    pub inspector_endpoint: Option<String>,

    #[command(flatten)]
    pub inspector_tls: InspectorTlsArgs,

    /// Image platforms from this file (the `images:` map of the `simulate --scenario`
    /// format) instead of the registries: for `multiarch bench` and registry-less runs.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["inspector_endpoint", "registries_config"])]
    pub image_platforms: Option<PathBuf>,

    /// Registry settings for in-process inspection.
    #[arg(long, value_name = "FILE", env = "MULTIARCH_REGISTRIES_CONFIG")]
    pub registries_config: Option<PathBuf>,

    /// Metrics and health listen address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:10259", env = "MULTIARCH_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,

    #[command(flatten)]
    pub log: LogArgs,
}

/// How a role reaches the image inspector: over mutual TLS with a certificate from
/// multiarch's CA (the operator mounts one), or in plain HTTP/2 without it.
#[cfg(feature = "inspector-client")]
#[derive(Debug, Default, clap::Args)]
pub struct InspectorTlsArgs {
    /// A directory with this role's client certificate for the inspector (`tls.crt`,
    /// `tls.key`) and the CAs the inspector's certificate must chain to (`ca.crt`): a
    /// mounted `kubernetes.io/tls` Secret, read again for every new connection.
    #[arg(long, value_name = "DIR", env = "MULTIARCH_INSPECTOR_TLS_DIR")]
    pub inspector_tls_dir: Option<std::path::PathBuf>,
}

/// The image inspector service a role always calls (the gate controller, the ENoExec
/// handler).
#[cfg(any(feature = "admission", feature = "enoexec-handler"))]
#[derive(Debug, clap::Args)]
pub struct InspectorServiceArgs {
    /// The image inspector (`multiarch inspector`); for the ENoExec handler, empty leaves
    /// out of its events whether the image has a build for the node's architecture.
    #[arg(
        long = "inspector-endpoint",
        default_value = "http://multiarch-inspector.multiarch.svc:9443",
        env = "MULTIARCH_INSPECTOR_ENDPOINT"
    )]
    pub endpoint: String,

    #[command(flatten)]
    pub tls: InspectorTlsArgs,
}

#[cfg(feature = "admission")]
#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    /// HTTPS listen address.
    #[arg(long, default_value = "0.0.0.0:9443", env = "MULTIARCH_WEBHOOK_LISTEN")]
    pub listen: SocketAddr,

    /// PEM certificate chain; reloaded when the file changes.
    #[arg(long, default_value = "/etc/multiarch/tls/tls.crt")]
    pub cert: PathBuf,

    /// PEM private key; reloaded when the file changes.
    #[arg(long, default_value = "/etc/multiarch/tls/tls.key")]
    pub key: PathBuf,

    /// Pin the scheduler name pods are routed to [default: the ClusterPodPlacementConfig's
    /// `spec.placement.schedulerName`, followed as it changes; multiarch-scheduler without
    /// one or with --no-kubernetes].
    #[arg(long, env = "MULTIARCH_SCHEDULER_NAME")]
    pub scheduler_name: Option<String>,

    /// multiarch's namespace, whose pods are never touched.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// Pin the mode instead of following the ClusterPodPlacementConfig.
    #[arg(long, value_parser = parse_mode)]
    pub mode: Option<multiarch_crd::PlacementMode>,

    /// Do not watch the ClusterPodPlacementConfig (tests, or --mode pinned).
    #[arg(long)]
    pub no_kubernetes: bool,

    /// The inspector (`multiarch inspector`) that answers routed pods' image platforms, so
    /// the architecture constraint joins the admission patch. Without it pods are routed
    /// without the constraint.
    #[arg(long, env = "MULTIARCH_INSPECTOR_ENDPOINT")]
    pub inspector_endpoint: Option<String>,

    #[command(flatten)]
    pub inspector_tls: InspectorTlsArgs,

    /// CAs the callers' client certificates must chain to: the one the API server
    /// presents to webhooks (its admission configuration's kubeconfig). Other callers
    /// are refused at the handshake, and lookups at admission use the pod's pull secrets.
    /// Reloaded when the file changes.
    #[arg(long, value_name = "FILE")]
    pub client_ca: Option<PathBuf>,

    /// Only the API server can reach this port (a NetworkPolicy that admits only its
    /// addresses, enforced by the network plugin): lookups at admission use the pod's
    /// pull secrets. Without it or --client-ca they use none: a crafted review naming
    /// another namespace's secrets learns nothing (private images are routed without
    /// the constraint; the scheduler still places them by their images).
    #[arg(long)]
    pub callers_limited_to_api_server: bool,

    /// After SIGTERM, how long the webhook goes on answering (with `/readyz` at 503)
    /// before it closes its port, so that the API server's requests already on their way
    /// while the pod leaves the Service's endpoints are answered.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub shutdown_delay: Duration,

    /// How long admission waits for the images' platforms before routing the pod without
    /// the constraint (well inside the webhook's `timeoutSeconds`).
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    pub admission_lookup_deadline: Duration,

    /// Image lookups at once, those finishing in the background included; a pod beyond
    /// them is routed without the constraint.
    #[arg(long, default_value_t = 256)]
    pub admission_lookups_in_flight: usize,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "admission")]
fn parse_mode(text: &str) -> Result<multiarch_crd::PlacementMode, String> {
    match text {
        "Scheduler" => Ok(multiarch_crd::PlacementMode::Scheduler),
        "SchedulingGate" => Ok(multiarch_crd::PlacementMode::SchedulingGate),
        other => Err(format!(
            "unknown mode {other:?}: use Scheduler or SchedulingGate"
        )),
    }
}

#[cfg(feature = "inspector")]
#[derive(Debug, clap::Args)]
pub struct InspectorArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    /// gRPC listen address.
    #[arg(
        long,
        default_value = "0.0.0.0:9443",
        env = "MULTIARCH_INSPECTOR_LISTEN"
    )]
    pub listen: SocketAddr,

    #[command(flatten)]
    pub ops: OpsArgs,

    /// Registry settings (YAML): CA bundles, plain-HTTP registries, mirrors, blocked.
    /// Followed: a change is in use within --registries-config-check.
    #[arg(long, value_name = "FILE", env = "MULTIARCH_REGISTRIES_CONFIG")]
    pub registries_config: Option<PathBuf>,

    /// The --registries-config file may be absent (an optional ConfigMap): no settings
    /// until it appears.
    #[arg(long, requires = "registries_config")]
    pub registries_config_optional: bool,

    /// How often the --registries-config file is checked for changes.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub registries_config_check: Duration,

    /// Do not read pull secrets from Kubernetes (anonymous pulls only).
    #[arg(long)]
    pub no_kubernetes: bool,

    /// Inspection results kept in memory.
    #[arg(long, default_value_t = 10_000)]
    pub cache_size: usize,

    /// Memory the kept results may take in all, in MiB (estimated from their contents;
    /// the least recently used go first).
    #[arg(long, default_value_t = 64)]
    pub cache_max_mib: usize,

    /// How long an answer for a tag is trusted (digests never expire).
    #[arg(long, default_value = "6h", value_parser = humantime::parse_duration)]
    pub tag_ttl: Duration,

    /// How long a failure is remembered before the registry is asked again.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub negative_ttl: Duration,

    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,

    /// For a whole inspection, retries and mirrors included.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    /// A directory with the gRPC port's certificate (`tls.crt`, `tls.key`) and the CAs
    /// every client's certificate must chain to (`ca.crt`): clients without one are
    /// refused at the handshake. Files are reloaded when they change. Without it the
    /// port speaks plain HTTP/2 to anyone who reaches it.
    #[arg(long, value_name = "DIR", env = "MULTIARCH_INSPECTOR_TLS_DIR")]
    pub tls_dir: Option<PathBuf>,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "admission")]
#[derive(Debug, clap::Args)]
pub struct GateControllerArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    pub lease: LeaseArgs,

    #[command(flatten)]
    pub inspector: InspectorServiceArgs,

    /// multiarch's namespace (never processed; holds the Lease).
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// Pods processed at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,

    #[command(flatten)]
    pub ops: OpsArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "enoexec-daemon")]
#[derive(Debug, clap::Args)]
pub struct EnoexecDaemonArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    /// This node (from the downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,

    /// Where ENoExecEvents are created: multiarch's namespace.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// The CRI socket; by default the first of containerd's, CRI-O's and k3s's that
    /// exists, under /host/run (the DaemonSet's mount of the host's /run) or /run.
    #[arg(long, env = "CONTAINER_RUNTIME_ENDPOINT")]
    pub runtime_endpoint: Option<String>,

    /// The host's /proc (the daemon runs with hostPID).
    #[arg(long, default_value = "/proc")]
    pub proc_root: PathBuf,

    /// Where the host's cgroup file system is mounted (its v2 hierarchy, or a hybrid
    /// host's `unified` child, is searched); by default /sys/fs/cgroup.
    #[arg(long)]
    pub cgroup_root: Option<PathBuf>,

    /// Steady ENoExecEvent writes per second.
    #[arg(long, default_value_t = 5.0)]
    pub rate: f64,

    /// ENoExecEvent writes allowed at once above the steady rate.
    #[arg(long, default_value_t = 10)]
    pub burst: u32,

    /// Report a container at most once per this window.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub dedup_window: Duration,

    /// Located errors waiting to be written; more are dropped and counted.
    #[arg(long, default_value_t = 256)]
    pub queue_capacity: usize,

    #[command(flatten)]
    pub ops: OpsArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "enoexec-handler")]
#[derive(Debug, clap::Args)]
pub struct EnoexecHandlerArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
    pub lease: LeaseArgs,

    /// multiarch's namespace: where ENoExecEvents and the Lease live.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    #[command(flatten)]
    pub inspector: InspectorServiceArgs,

    /// With `misplacedPodCorrection` on: how often running pods are compared with their
    /// nodes' architectures (exec format errors are acted on at once).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub misplaced_scan_interval: std::time::Duration,

    /// Running pods one scan looks at, at most (their images are inspected, cached).
    #[arg(long, default_value_t = 2000)]
    pub misplaced_scan_max_pods: usize,

    #[command(flatten)]
    pub ops: OpsArgs,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "operator")]
#[derive(Debug, clap::Args)]
pub struct OperatorArgs {
    #[command(flatten)]
    pub client: ClientArgs,

    #[command(flatten)]
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

    /// How long pods (and exec-format-error reports) may wait for a component that is
    /// being removed (uninstall, mode switch) before the operator releases them itself.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,

    /// How long the components serving a removed route (uninstall, a mode switch away
    /// from the scheduler) stay after the operator sees the route gone: longer than an
    /// admission review may take (the webhook's 10 s timeout) plus the API servers' delay
    /// in seeing the change. Pods still routed meanwhile are placed or released.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub route_settle: Duration,

    /// How often the certificates are checked (they are renewed months before expiry).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub certificate_check: Duration,

    #[command(flatten)]
    pub log: LogArgs,
}
