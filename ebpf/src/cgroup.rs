//! Which Kubernetes container a process runs in, from its cgroup path.
//!
//! The kubelet puts every pod under `kubepods` and the runtime puts every container in a
//! child cgroup named after its ID. The names depend on the cgroup driver and the runtime:
//!
//! | driver  | runtime    | pod component                                 | container component        |
//! |---------|------------|-----------------------------------------------|----------------------------|
//! | systemd | containerd | `kubepods-burstable-pod<uid, _ for ->.slice`  | `cri-containerd-<id>.scope`|
//! | systemd | CRI-O      | same                                          | `crio-<id>.scope`          |
//! | cgroupfs| containerd | `pod<uid>`                                    | `<id>`                     |
//! | cgroupfs| CRI-O      | `pod<uid>`                                    | `crio-<id>`                |
//!
//! With cgroup v1 `/proc/PID/cgroup` has one line per hierarchy, with v2 a single `0::`
//! line; with a private cgroup namespace the path is relative (`/../..`). Only the path's
//! components are read, so all of these parse the same way. CRI-O's monitor (`crio-conmon-`)
//! is not the container.

/// A process's container, as its cgroup names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerCgroup {
    /// The runtime's 64-hex-digit container ID.
    pub container_id: String,
    /// The pod's UID (with dashes).
    pub pod_uid: String,
}

/// Parses the content of `/proc/PID/cgroup`; `None` when the process is not in a Kubernetes
/// container (a host process, a pod sandbox's own cgroup, a runtime's monitor).
pub fn parse_proc_cgroup(content: &str) -> Option<ContainerCgroup> {
    content.lines().find_map(|line| {
        // `hierarchy-ID:controller-list:cgroup-path`; the path may itself contain ':'.
        let mut fields = line.splitn(3, ':');
        let _hierarchy = fields.next()?;
        let _controllers = fields.next()?;
        parse_path(fields.next()?)
    })
}

/// Parses one cgroup path (as in `/proc/PID/cgroup`, or relative to the cgroup v2 mount).
pub fn parse_path(path: &str) -> Option<ContainerCgroup> {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let (last, parents) = components.split_last()?;
    let container_id = container_id(last)?;
    let pod_uid = parents.iter().rev().find_map(|c| pod_uid(c))?;
    Some(ContainerCgroup {
        container_id: container_id.to_owned(),
        pod_uid,
    })
}

fn container_id(component: &str) -> Option<&str> {
    let name = component.strip_suffix(".scope").unwrap_or(component);
    let id = ["cri-containerd-", "crio-", "docker-", ""]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix).filter(|id| is_container_id(id)))?;
    Some(id)
}

fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `kubepods-besteffort-pod<uid>.slice` (systemd, `_` for `-`) or `pod<uid>` (cgroupfs).
fn pod_uid(component: &str) -> Option<String> {
    let start = component.rfind("pod")? + "pod".len();
    let uid = component[start..]
        .strip_suffix(".slice")
        .unwrap_or(&component[start..]);
    let uid = uid.replace('_', "-");
    is_uid(&uid).then_some(uid)
}

fn is_uid(uid: &str) -> bool {
    uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4d3c1f2a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c";
    const UID: &str = "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

    #[test]
    fn container_and_pod_from_every_driver_and_runtime() {
        let uid_ = UID.replace('-', "_");
        let cases = [
            format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{ID}.scope"
            ),
            format!(
                "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid_}.slice/crio-{ID}.scope"
            ),
            format!("0::/kubepods.slice/kubepods-pod{uid_}.slice/crio-{ID}.scope"),
            format!("0::/kubepods/burstable/pod{UID}/{ID}"),
            format!("0::/kubepods/besteffort/pod{UID}/crio-{ID}"),
            format!("0::/kubepods.slice/kubepods-pod{uid_}.slice/docker-{ID}.scope"),
            format!(
                "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{uid_}.slice/cri-containerd-{ID}.scope"
            ),
            format!("0::/../../kubepods-besteffort-pod{uid_}.slice/cri-containerd-{ID}.scope"),
        ];
        for case in cases {
            assert_eq!(
                parse_proc_cgroup(&case),
                Some(ContainerCgroup {
                    container_id: ID.into(),
                    pod_uid: UID.into()
                }),
                "{case}"
            );
        }
    }

    #[test]
    fn not_kubernetes_containers() {
        let uid_ = UID.replace('-', "_");
        for case in [
            "0::/".to_owned(),
            "0::/system.slice/sshd.service".to_owned(),
            format!("0::/system.slice/docker-{ID}.scope"), // a container, but no pod
            format!("0::/kubepods.slice/kubepods-pod{uid_}.slice/crio-conmon-{ID}.scope"),
            format!("0::/kubepods.slice/kubepods-pod{uid_}.slice"), // the pod's own cgroup
            format!("0::/kubepods/burstable/pod{UID}/{}", &ID[..63]), // short ID
            format!("0::/kubepods/burstable/pod{UID}/{}", ID.to_uppercase()),
            format!("0::/kubepods/burstable/podnot-a-uid/{ID}"),
            String::new(),
            "garbage without colons".to_owned(),
        ] {
            assert_eq!(parse_proc_cgroup(&case), None, "{case}");
        }
    }

    #[test]
    fn v1_files_are_read_line_by_line() {
        let file = format!(
            "12:pids:/\n11:hugetlb:/\n4:memory:/kubepods/burstable/pod{UID}/{ID}\n1:name=systemd:/system.slice/containerd.service\n0::/\n"
        );
        assert_eq!(parse_proc_cgroup(&file).unwrap().container_id, ID);
    }
}
