//! Flags of the commands run from a workstation or CI: simulate, bench, inspect, audit
//! and the generators.

use std::path::PathBuf;
#[cfg(any(feature = "scheduler", feature = "audit", feature = "inspector"))]
use std::time::Duration;

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

    /// The scheduler's `percentageOfNodesToScore` (the ClusterPodPlacementConfig's
    /// `spec.placement.percentageOfNodesToScore`): 1-100, or 0 for kube-scheduler's
    /// adaptive share (50 % of small clusters, down to 5 % from 5,625 nodes). Overrides
    /// the scenario's.
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub percentage_of_nodes_to_score: Option<u8>,

    /// Audits placement quality: one scheduling cycle in N also scores every feasible
    /// node, and the report compares the node chosen with the best (the audits' time is
    /// not counted in the throughput).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub quality_sample: Option<u64>,

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
    /// before starting it (a scheduler started here first places a warm-up pod, so its
    /// start-up is not timed). 0: as fast as the client may. Without a command the pods
    /// are always created live.
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

    /// Also read each platform's binaries from its layers: the program its config runs
    /// (through links and `#!` lines) and its loader, the architecture they really are
    /// and the x86-64 level they need. Streams the layers: a large image takes a while
    /// (bounded by 8 GiB fetched and 10 minutes per platform).
    #[arg(long)]
    pub binaries: bool,

    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[cfg(feature = "operator")]
#[derive(Debug, clap::Args)]
pub struct ManifestsArgs {
    /// The manifests directory (the repository's `manifests/`).
    #[arg(long, value_name = "DIR", default_value = "manifests")]
    pub dir: PathBuf,
}

#[derive(Debug, clap::Args)]
pub struct CertificatesArgs {
    /// multiarch's namespace: the Secrets' and the Services' the certificates name.
    #[arg(long, default_value = "multiarch")]
    pub namespace: String,

    /// Also write the CA bundle (base64, as a MutatingWebhookConfiguration's `caBundle`
    /// takes it) to this file.
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct CrdsArgs {
    /// Write one file per CRD into this directory (as checked in under manifests/crds)
    /// instead of printing them.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

#[cfg(feature = "audit")]
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum AuditFormat {
    Table,
    Json,
    Yaml,
    Markdown,
}

/// What an amd64 node that does not say its x86-64 level runs, spelled as
/// `binaryInspection.unknownNodeLevel` spells it.
#[cfg(feature = "audit")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum UnknownNodeLevelArg {
    // No doc comments on the values: clap would print the whole help in its long form.
    #[value(name = "AnyLevel")]
    AnyLevel,
    #[value(name = "Baseline")]
    Baseline,
}

#[cfg(feature = "audit")]
impl From<UnknownNodeLevelArg> for multiarch_crd::UnknownNodeLevel {
    fn from(arg: UnknownNodeLevelArg) -> Self {
        match arg {
            UnknownNodeLevelArg::AnyLevel => multiarch_crd::UnknownNodeLevel::AnyLevel,
            UnknownNodeLevelArg::Baseline => multiarch_crd::UnknownNodeLevel::Baseline,
        }
    }
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
        required_unless_present_any = ["demo", "cluster", "bundle", "bundle_image"]
    )]
    pub filenames: Vec<PathBuf>,

    /// Audit an OLM operator bundle directory (`manifests/` and `metadata/`): does its
    /// ClusterServiceVersion keep the architecture promises of its
    /// `operatorframework.io/arch.*` and `os.*` labels? Exits 3 on an error finding.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["filenames", "demo", "platforms", "routed_only", "bundle_image"]
    )]
    pub bundle: Option<PathBuf>,

    /// Audit an OLM bundle image, its layers read from the registry (no container tool),
    /// as `--bundle` does a directory.
    #[arg(
        long,
        value_name = "IMAGE",
        conflicts_with_all = ["filenames", "demo", "platforms", "routed_only"]
    )]
    pub bundle_image: Option<String>,

    /// Audit the live cluster's workloads (Deployments, StatefulSets, DaemonSets,
    /// ReplicaSets and Jobs without owner, CronJobs, bare Pods), with their pull secrets
    /// and service accounts', against its nodes' architectures, and report pods running
    /// now on nodes their images cannot run on. With `--bundle`: which of the cluster's
    /// node architectures the bundle's operands can run on.
    #[arg(long)]
    pub cluster: bool,

    /// kubeconfig file for `--cluster`; without it, KUBECONFIG, ~/.kube/config or the
    /// in-cluster config.
    #[arg(long, env = "KUBECONFIG", requires = "cluster")]
    pub kubeconfig: Option<PathBuf>,

    /// `--cluster`: only workloads the ClusterPodPlacementConfig routes (its
    /// namespaceSelector, less the namespaces and pods routing always leaves alone).
    #[arg(long, requires = "cluster")]
    pub routed_only: bool,

    /// `--cluster`: what an amd64 node that does not say its x86-64 level (neither
    /// multiarch's `arch-variant` label nor node-feature-discovery's CPUID labels) runs
    /// when judging the pods running now [default: the ClusterPodPlacementConfig's
    /// `binaryInspection.unknownNodeLevel`, as placement reads it; AnyLevel without one].
    #[arg(long, value_enum, requires = "cluster", value_name = "LEVEL")]
    pub unknown_node_level: Option<UnknownNodeLevelArg>,

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

    /// Read each image's binaries too (as `inspect --binaries`) and judge by them, as the
    /// `binaryInspection` plugin places: an amd64 build needs the x86-64 level its
    /// binaries need, and a build whose program is of another architecture than its
    /// index entry says is not counted (listed as mislabelled). Fetches the builds' layers.
    #[arg(long, conflicts_with_all = ["demo", "platforms"])]
    pub binaries: bool,

    #[command(flatten)]
    pub registry: RegistryAccessArgs,

    #[arg(short = 'o', long = "output", value_enum, default_value_t = AuditFormat::Table)]
    pub output: AuditFormat,
}
