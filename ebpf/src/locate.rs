//! An exec event to the Kubernetes container it happened in.

use std::path::PathBuf;

use crate::{
    cgroup::{self, ContainerCgroup},
    cgroup_id,
    cri::{ContainerDirectory, ContainerInfo, CriError},
    event::ExecEvent,
};

/// Where an event happened.
#[derive(Debug)]
pub enum Location {
    /// In a container of a pod.
    Container(ContainerInfo),
    /// In a process outside any Kubernetes container (the host, a runtime's monitor).
    Outside,
    /// The process and its cgroup were gone before they could be read.
    Gone,
    /// In a Kubernetes container the runtime could not describe.
    Unresolved(CriError),
}

/// Finds containers for events: `/proc/PID/cgroup` of the caller, else the cgroup v2 id the
/// kernel program recorded, else the caller's parent; then the runtime for the pod.
pub struct Locator<D> {
    proc_root: PathBuf,
    cgroup_v2_root: Option<PathBuf>,
    directory: D,
}

impl<D: ContainerDirectory> Locator<D> {
    /// `proc_root` is the host's `/proc` (the daemon runs with `hostPID`).
    pub fn new(proc_root: PathBuf, cgroup_v2_root: Option<PathBuf>, directory: D) -> Self {
        Self {
            proc_root,
            cgroup_v2_root,
            directory,
        }
    }

    pub async fn locate(&self, event: &ExecEvent) -> Location {
        let Some(found) = self.cgroup_of(event) else {
            return if self.alive(event.tgid) {
                Location::Outside
            } else {
                Location::Gone
            };
        };
        match self.directory.container(&found.container_id).await {
            Ok(info) if info.pod_uid != found.pod_uid => {
                // The ID was reused or the labels lie; neither names this pod reliably.
                tracing::warn!(container = %found.container_id, cgroup_pod = %found.pod_uid, runtime_pod = %info.pod_uid, "pod UID from the cgroup and the runtime disagree");
                Location::Unresolved(CriError::NotFound(found.container_id))
            }
            Ok(info) => Location::Container(info),
            Err(e) => Location::Unresolved(e),
        }
    }

    fn cgroup_of(&self, event: &ExecEvent) -> Option<ContainerCgroup> {
        self.cgroup_in_proc(event.tgid)
            .or_else(|| {
                let root = self.cgroup_v2_root.as_ref()?;
                cgroup::parse_path(&cgroup_id::path_of(root, event.cgroup_id)?)
            })
            .or_else(|| self.cgroup_in_proc(event.ppid))
    }

    fn cgroup_in_proc(&self, pid: u32) -> Option<ContainerCgroup> {
        let path = self.proc_root.join(pid.to_string()).join("cgroup");
        cgroup::parse_proc_cgroup(&std::fs::read_to_string(path).ok()?)
    }

    fn alive(&self, pid: u32) -> bool {
        self.proc_root.join(pid.to_string()).exists()
    }
}
