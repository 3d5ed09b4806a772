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

/// What the host alone says about an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    Cgroup(ContainerCgroup),
    Outside,
    Gone,
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

    /// Both steps: [`Self::find_cgroup`], then [`Self::describe`].
    pub async fn locate(&self, event: &ExecEvent) -> Location {
        match self.find_cgroup(event) {
            Found::Cgroup(cgroup) => match self.describe(&cgroup).await {
                Ok(info) => Location::Container(info),
                Err(e) => Location::Unresolved(e),
            },
            Found::Outside => Location::Outside,
            Found::Gone => Location::Gone,
        }
    }

    /// The container's cgroup, from the host alone (no runtime call): cheap enough to run
    /// on every event, so bursts can be filtered before the runtime is asked.
    pub fn find_cgroup(&self, event: &ExecEvent) -> Found {
        match self.cgroup_of(event) {
            Some(cgroup) => Found::Cgroup(cgroup),
            None if self.alive(event.tgid) => Found::Outside,
            None => Found::Gone,
        }
    }

    /// The pod of a container, from the runtime.
    pub async fn describe(&self, cgroup: &ContainerCgroup) -> Result<ContainerInfo, CriError> {
        let info = self.directory.container(&cgroup.container_id).await?;
        if info.pod_uid != cgroup.pod_uid {
            // The ID was reused or the labels lie; neither names this pod reliably.
            tracing::warn!(container = %cgroup.container_id, cgroup_pod = %cgroup.pod_uid, runtime_pod = %info.pod_uid, "pod UID from the cgroup and the runtime disagree");
            return Err(CriError::NotFound(cgroup.container_id.clone()));
        }
        Ok(info)
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
