//! Property tests for the cgroup paths read from `/proc/PID/cgroup`: whatever a process's
//! cgroup is called (a tenant's container can create nested cgroups with any name), the
//! parser answers without panicking; every path the kubelet and runtimes create gives its
//! container and pod back.

#![allow(clippy::unwrap_used)]

use multiarch_ebpf::cgroup::{parse_path, parse_proc_cgroup};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn any_content_parses_or_is_ignored(content in "(.{0,80}\n){0,4}") {
        let _ = parse_proc_cgroup(&content);
        for line in content.lines() {
            let _ = parse_path(line);
        }
    }

    /// Near misses: the right shapes with the wrong lengths or characters.
    #[test]
    fn near_misses_are_not_containers(
        id in "[0-9a-f]{60,70}",
        uid in "[0-9a-f_-]{30,40}",
        prefix in prop_oneof![Just(""), Just("crio-"), Just("cri-containerd-"), Just("crio-conmon-")],
    ) {
        let path = format!("/kubepods/burstable/pod{uid}/{prefix}{id}");
        if let Some(found) = parse_path(&path) {
            prop_assert_eq!(found.container_id.len(), 64);
            prop_assert_eq!(found.pod_uid.len(), 36);
            prop_assert!(prefix != "crio-conmon-", "a runtime monitor is not a container");
        }
    }

    /// What the kubelet and the runtimes create, under both drivers and cgroup versions.
    #[test]
    fn every_kubelet_layout_gives_the_container_and_pod(
        id in "[0-9a-f]{64}",
        uid in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        qos in prop_oneof![Just(""), Just("burstable"), Just("besteffort")],
        systemd in any::<bool>(),
        crio in any::<bool>(),
        v1 in any::<bool>(),
    ) {
        let path = if systemd {
            let uid_ = uid.replace('-', "_");
            let (qos_slice, pod) = if qos.is_empty() {
                (String::new(), format!("kubepods-pod{uid_}.slice"))
            } else {
                (format!("kubepods-{qos}.slice/"), format!("kubepods-{qos}-pod{uid_}.slice"))
            };
            let container = if crio { format!("crio-{id}.scope") } else { format!("cri-containerd-{id}.scope") };
            format!("/kubepods.slice/{qos_slice}{pod}/{container}")
        } else {
            let qos_dir = if qos.is_empty() { String::new() } else { format!("{qos}/") };
            let container = if crio { format!("crio-{id}") } else { id.clone() };
            format!("/kubepods/{qos_dir}pod{uid}/{container}")
        };
        let content = if v1 {
            format!("12:memory:{path}\n11:cpu,cpuacct:{path}\n1:name=systemd:{path}\n")
        } else {
            format!("0::{path}\n")
        };
        let found = parse_proc_cgroup(&content).unwrap();
        prop_assert_eq!(found.container_id, id);
        prop_assert_eq!(found.pod_uid, uid);
    }
}
