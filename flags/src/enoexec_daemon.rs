//! `multiarch enoexec-daemon`.

use std::{path::PathBuf, time::Duration};

use multiarch_runtime::{
    logging::LogArgs,
    role_args::{ClientArgs, OpsArgs, duration_flag},
};
use serde::Serialize;

#[derive(Clone, Debug, PartialEq, clap::Args, Serialize)]
pub struct EnoexecDaemonArgs {
    #[command(flatten)]
    #[serde(flatten)]
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
    #[serde(serialize_with = "duration_flag")]
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    pub dedup_window: Duration,

    /// Located errors waiting to be written; more are dropped and counted.
    #[arg(long, default_value_t = 256)]
    pub queue_capacity: usize,

    /// Do not label an amd64 node with its CPU's x86-64 level
    /// (`multiarch.openshift.io/arch-variant`: `v1` .. `v4`), which the scheduler, the
    /// webhook and the gate path read to keep images built for a higher level away.
    #[arg(long)]
    pub no_node_level_label: bool,

    #[command(flatten)]
    #[serde(flatten)]
    pub ops: OpsArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
}

role_flags!(EnoexecDaemonArgs, "enoexec-daemon");
