//! Command-line interface.

#[cfg(any(
    feature = "scheduler",
    feature = "admission",
    feature = "inspector",
    feature = "enoexec-daemon",
    feature = "enoexec-handler"
))]
use std::net::SocketAddr;
use std::path::PathBuf;
#[cfg(any(
    feature = "scheduler",
    feature = "inspector",
    feature = "enoexec-daemon",
    feature = "audit",
    feature = "admission"
))]
use std::time::Duration;

use clap::{Parser, Subcommand};
#[cfg(any(
    feature = "scheduler",
    feature = "admission",
    feature = "inspector",
    feature = "enoexec-daemon",
    feature = "enoexec-handler"
))]
use multiarch_runtime::logging::LogArgs;

/// Architecture-aware scheduling for Kubernetes clusters with mixed CPU architectures.
#[derive(Debug, Parser)]
#[command(name = "multiarch", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the real scheduler on an in-memory mixed-architecture cluster and report
    /// placements, reasons, throughput and what an architecture-blind scheduler would do.
    #[cfg(feature = "scheduler")]
    Simulate(SimulateArgs),
    /// Run the secondary scheduler in a cluster (pods with schedulerName multiarch-scheduler).
    #[cfg(feature = "scheduler")]
    Scheduler(SchedulerArgs),
    /// Gate mode: set the architecture affinity of gated pods and remove the gate.
    #[cfg(feature = "admission")]
    GateController(GateControllerArgs),
    /// On a node: report containers that fail with `exec format error` as ENoExecEvents
    /// (eBPF on the exec tracepoints; needs root or CAP_BPF + CAP_PERFMON, and hostPID).
    #[cfg(feature = "enoexec-daemon")]
    EnoexecDaemon(EnoexecDaemonArgs),
    /// Turn ENoExecEvents into ExecFormatError events and a label on the pods.
    #[cfg(feature = "enoexec-handler")]
    EnoexecHandler(EnoexecHandlerArgs),
    /// Serve the mutating admission webhook that routes (or gates) new pods.
    #[cfg(feature = "admission")]
    Webhook(WebhookArgs),
    /// Print the platforms (os/architecture/variant) an image has builds for.
    #[cfg(feature = "inspector")]
    Inspect(InspectArgs),
    /// Which workloads of a set of manifests can run on which architectures, and what
    /// routing would do with them.
    #[cfg(feature = "audit")]
    Audit(AuditArgs),
    /// Measure a scheduler end to end against an API server (KUBECONFIG): fake nodes,
    /// pods, bindings observed; optionally against the bind-only baseline.
    #[cfg(feature = "scheduler")]
    Bench(BenchArgs),
    /// Serve image inspection over gRPC (reads pull secrets from the cluster).
    #[cfg(feature = "inspector")]
    Inspector(InspectorArgs),
    /// Write the generated install manifests (RBAC, Deployments) under DIR/scheduler.
    #[cfg(feature = "operator")]
    Manifests(ManifestsArgs),
    /// Print the CustomResourceDefinitions generated from the API types.
    Crds(CrdsArgs),
}

#[cfg(feature = "scheduler")]
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Nodes of the embedded default cluster (60% amd64, 30% arm64, 5% ppc64le, 5% s390x).
    #[arg(long, default_value_t = 1000)]
    pub nodes: usize,

    /// Pods drawn from the embedded workload catalog.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,

    /// A scenario file (YAML: images, nodes, pods, ClusterPodPlacementConfig spec,
    /// PodPlacementConfigs) instead of the embedded default.
    #[arg(long, value_name = "FILE")]
    pub scenario: Option<PathBuf>,

    /// Seed of the generated cluster and of tie-breaking.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Node status updates per node per minute while pods are scheduled (heartbeats:
    /// they change nothing the scheduler reads).
    #[arg(long, default_value_t = 0)]
    pub node_updates_per_minute: u32,

    /// Retry waiting pods on every change their plugins registered, as before queueing
    /// hints (to measure what the hints save).
    #[arg(long)]
    pub no_queueing_hints: bool,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[cfg(feature = "scheduler")]
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Fake Node objects to create (60/30/5/5 % amd64/arm64/ppc64le/s390x).
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,

    /// Pods to create, their images taken in turn from the platforms file.
    #[arg(long, default_value_t = 10_000)]
    pub pods: usize,

    /// Image platforms (the `images:` map of the `simulate --scenario` format); give the
    /// scheduler the same file (`multiarch scheduler --image-platforms FILE`).
    #[arg(long, value_name = "FILE")]
    pub platforms: PathBuf,

    /// The schedulerName of the pods the scheduler under test places.
    #[arg(long, default_value = "multiarch-scheduler")]
    pub scheduler_name: String,

    /// Create the pods live at this many per second while the scheduler runs, instead of
    /// before starting it. 0: as fast as the client may.
    #[arg(long, value_name = "PODS_PER_SECOND")]
    pub create_rate: Option<f64>,

    /// Only the bind-only baseline (no scheduler).
    #[arg(long, conflicts_with_all = ["compare_bind_only", "command"])]
    pub bind_only: bool,

    /// After the scheduler's run, the bind-only baseline on the same nodes, and the ratio.
    #[arg(long)]
    pub compare_bind_only: bool,

    /// The scheduler's process id, for its peak RSS and CPU time (when it is not started
    /// by this command).
    #[arg(long)]
    pub scheduler_pid: Option<u32>,

    /// Client QPS and burst of this command and of the baseline.
    #[arg(long, default_value_t = 5000.0)]
    pub qps: f64,
    #[arg(long, default_value_t = 5000)]
    pub burst: u32,

    /// Bindings in flight at once in the baseline (the scheduler's default).
    #[arg(long, default_value_t = 16)]
    pub bind_concurrency: usize,

    /// Namespace of the pods (created if missing, removed afterwards when created here).
    #[arg(long, default_value = "multiarch-bench")]
    pub namespace: String,

    /// Give up on a run after this long.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,

    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// The scheduler to start once the pods exist (pre-created pods), stopped with
    /// SIGTERM at the end: `-- multiarch scheduler --image-platforms FILE ...`. Without
    /// it the pods are created live for the scheduler already running.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[cfg(any(feature = "scheduler", feature = "inspector"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

#[cfg(feature = "scheduler")]
#[derive(Debug, clap::Args)]
pub struct SchedulerArgs {
    /// kubeconfig file; without it, KUBECONFIG, ~/.kube/config or the in-cluster config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

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

    /// Run leader election (needed with more than one replica).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "MULTIARCH_LEADER_ELECT")]
    pub leader_elect: bool,

    /// The Lease name; defaults to the scheduler name (never kube-scheduler's).
    #[arg(long)]
    pub lease_name: Option<String>,

    /// This replica's identity in the Lease and events; defaults to the pod name plus a suffix.
    #[arg(long, env = "MULTIARCH_IDENTITY")]
    pub identity: Option<String>,

    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,

    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub renew_deadline: Duration,

    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub retry_period: Duration,

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

#[cfg(feature = "admission")]
#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    /// HTTPS listen address.
    #[arg(long, default_value = "0.0.0.0:9443", env = "MULTIARCH_WEBHOOK_LISTEN")]
    pub listen: SocketAddr,

    /// PEM certificate chain; reloaded when the file changes.
    #[arg(long, default_value = "/etc/multiarch/tls/tls.crt")]
    pub cert: PathBuf,

    /// PEM private key; reloaded when the file changes.
    #[arg(long, default_value = "/etc/multiarch/tls/tls.key")]
    pub key: PathBuf,

    /// The scheduler name pods are routed to.
    #[arg(
        long,
        default_value = "multiarch-scheduler",
        env = "MULTIARCH_SCHEDULER_NAME"
    )]
    pub scheduler_name: String,

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

/// How the commands that inspect images from this machine reach the registries.
#[cfg(any(feature = "inspector", feature = "audit"))]
#[derive(Debug, clap::Args)]
pub struct RegistryAccessArgs {
    /// A docker/podman auth file (`{"auths": {...}}`) with pull credentials.
    #[arg(long, value_name = "FILE", env = "REGISTRY_AUTH_FILE")]
    pub authfile: Option<PathBuf>,

    /// Registry settings (YAML): CA bundles, plain-HTTP registries, mirrors, blocked.
    #[arg(long, value_name = "FILE")]
    pub registries_config: Option<PathBuf>,

    /// Give up on an image after this long (e.g. 30s, 2m).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[cfg(feature = "inspector")]
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The image reference, as in a pod spec (`nginx`, `quay.io/org/app:1`, `...@sha256:...`).
    pub image: String,

    #[command(flatten)]
    pub registry: RegistryAccessArgs,

    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[cfg(feature = "inspector")]
#[derive(Debug, clap::Args)]
pub struct InspectorArgs {
    /// gRPC listen address.
    #[arg(
        long,
        default_value = "0.0.0.0:9443",
        env = "MULTIARCH_INSPECTOR_LISTEN"
    )]
    pub listen: SocketAddr,

    /// Metrics and health listen address (/metrics, /healthz, /readyz).
    #[arg(long, default_value = "0.0.0.0:8080", env = "MULTIARCH_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,

    /// Registry settings (YAML): CA bundles, plain-HTTP registries, mirrors, blocked.
    #[arg(long, value_name = "FILE", env = "MULTIARCH_REGISTRIES_CONFIG")]
    pub registries_config: Option<PathBuf>,

    /// Do not read pull secrets from Kubernetes (anonymous pulls only).
    #[arg(long)]
    pub no_kubernetes: bool,

    /// Inspection results kept in memory.
    #[arg(long, default_value_t = 10_000)]
    pub cache_size: usize,

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

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "admission")]
#[derive(Debug, clap::Args)]
pub struct GateControllerArgs {
    /// The image inspector service (`multiarch inspector`).
    #[arg(
        long,
        default_value = "http://multiarch-inspector.multiarch.svc:9443",
        env = "MULTIARCH_INSPECTOR_ENDPOINT"
    )]
    pub inspector_endpoint: String,

    /// multiarch's namespace (never processed; holds the Lease).
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// Pods processed at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,

    #[arg(long, default_value = "0.0.0.0:8080", env = "MULTIARCH_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "enoexec-daemon")]
#[derive(Debug, clap::Args)]
pub struct EnoexecDaemonArgs {
    /// This node (from the downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,

    /// Where ENoExecEvents are created: multiarch's namespace.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// The CRI socket; by default the first of containerd's and CRI-O's that exists, under
    /// /host/run (the DaemonSet's mount of the host's /run) or /run.
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

    #[arg(long, default_value = "0.0.0.0:8080", env = "MULTIARCH_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "enoexec-handler")]
#[derive(Debug, clap::Args)]
pub struct EnoexecHandlerArgs {
    /// multiarch's namespace: where ENoExecEvents and the Lease live.
    #[arg(long, default_value = "multiarch", env = "POD_NAMESPACE")]
    pub namespace: String,

    /// The image inspector (`multiarch inspector`), to say in the event whether the image
    /// has a build for the node's architecture; empty to leave that out.
    #[arg(
        long,
        default_value = "http://multiarch-inspector.multiarch.svc:9443",
        env = "MULTIARCH_INSPECTOR_ENDPOINT"
    )]
    pub inspector_endpoint: String,

    #[arg(long, default_value = "0.0.0.0:8080", env = "MULTIARCH_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,

    #[command(flatten)]
    pub log: LogArgs,
}

#[cfg(feature = "operator")]
#[derive(Debug, clap::Args)]
pub struct ManifestsArgs {
    /// The manifests directory (the repository's `manifests/`).
    #[arg(long, value_name = "DIR", default_value = "manifests")]
    pub dir: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory (as checked in under manifests/crds)
    /// instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}

#[cfg(feature = "audit")]
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum AuditFormat {
    Table,
    Json,
    Yaml,
    Markdown,
}

#[cfg(feature = "audit")]
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Manifests: a file, a directory (its .yaml, .yml and .json files) or `-` for standard
    /// input; multi-document YAML as `kustomize build` or `helm template` prints it.
    #[arg(
        short = 'f',
        long = "filename",
        value_name = "PATH",
        required_unless_present_any = ["demo", "cluster"]
    )]
    pub filenames: Vec<PathBuf>,

    /// Audit the live cluster's workloads (Deployments, StatefulSets, DaemonSets,
    /// ReplicaSets and Jobs without owner, CronJobs, bare Pods), with their pull secrets
    /// and service accounts', against its nodes' architectures, and report pods running
    /// now on nodes their images cannot run on.
    #[arg(long, conflicts_with = "authfile")]
    pub cluster: bool,

    /// kubeconfig file for `--cluster`; without it, KUBECONFIG, ~/.kube/config or the
    /// in-cluster config.
    #[arg(long, env = "KUBECONFIG", requires = "cluster")]
    pub kubeconfig: Option<PathBuf>,

    /// `--cluster`: only workloads the ClusterPodPlacementConfig routes (its
    /// namespaceSelector, less the namespaces and pods routing always leaves alone).
    #[arg(long, requires = "cluster")]
    pub routed_only: bool,

    /// multiarch's own namespace, which routing leaves alone.
    #[arg(long, default_value = "multiarch")]
    pub multiarch_namespace: String,

    /// Audit an embedded example (a small shop's manifests and its images' platforms),
    /// with no registry access.
    #[arg(long, conflicts_with_all = ["filenames", "platforms", "cluster"])]
    pub demo: bool,

    /// Image platforms from this file instead of the registries (the `images:` map of the
    /// `simulate --scenario` format).
    #[arg(long, value_name = "FILE")]
    pub platforms: Option<PathBuf>,

    /// The architectures to judge against [default: the cluster's nodes' with
    /// `--cluster`, else amd64,arm64,ppc64le,s390x].
    #[arg(long = "arch", value_delimiter = ',')]
    pub arch: Option<Vec<String>>,

    /// Exit with 3, listing them, when a workload cannot run on this architecture.
    #[arg(long, value_name = "ARCH")]
    pub require_arch: Option<String>,

    /// `--cluster`: only this namespace (default: all). Manifests: the namespace of
    /// objects that name none (default: `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,

    /// Images inspected at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub concurrency: u16,

    #[command(flatten)]
    pub registry: RegistryAccessArgs,

    #[arg(short = 'o', long = "output", value_enum, default_value_t = AuditFormat::Table)]
    pub output: AuditFormat,
}
