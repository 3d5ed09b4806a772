//! An exec event to its pod: `/proc/PID/cgroup` files of every supported layout, the cgroup
//! v2 id fallback, and a fake CRI runtime on a unix socket.
#![allow(clippy::unwrap_used)]

use multiarch_test_support::fake_cri;

use std::{os::unix::fs::MetadataExt, path::Path, time::Duration};

use fake_cri::{FakeContainer, FakeCri};
use multiarch_ebpf::{
    cri::{CriClient, CriError},
    event::{ExecEvent, ExecSyscall},
    locate::{Location, Locator},
};

const ID: &str = "4d3c1f2a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c";
const UID: &str = "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/proc-cgroup");

fn container() -> FakeContainer {
    FakeContainer {
        id: ID.into(),
        name: "app".into(),
        pod: "web-7d9f".into(),
        namespace: "shop".into(),
        pod_uid: UID.into(),
        image: "quay.io/shop/web:1.4".into(),
        kubernetes: true,
    }
}

fn event(tgid: u32, ppid: u32, cgroup_id: u64) -> ExecEvent {
    ExecEvent {
        pid: tgid,
        tgid,
        ppid,
        ret: -8,
        cgroup_id,
        syscall: ExecSyscall::Execve,
        comm: "runc:[2:INIT]".into(),
        filename: Some("/app".into()),
    }
}

/// A fake host `/proc` where `pid` has the given cgroup file.
fn proc_with(root: &Path, pid: u32, fixture: &str) {
    let dir = root.join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(Path::new(FIXTURES).join(fixture), dir.join("cgroup")).unwrap();
}

async fn client(cri: &FakeCri) -> CriClient {
    CriClient::connect(cri.socket(), Duration::from_secs(5))
        .await
        .unwrap()
}

#[tokio::test]
async fn every_cgroup_layout_resolves_to_the_pod_through_the_runtime() {
    for (runtime, fixture) in [
        ("containerd", "containerd-systemd-v2.txt"),
        ("containerd", "containerd-systemd-v1.txt"),
        ("containerd", "containerd-cgroupfs-v1.txt"),
        ("cri-o", "crio-systemd-v2.txt"),
        ("cri-o", "crio-systemd-v1.txt"),
    ] {
        let cri = FakeCri::start(runtime).await;
        cri.add(container());
        let proc = tempfile::tempdir().unwrap();
        proc_with(proc.path(), 100, fixture);
        let locator = Locator::new(proc.path().into(), None, client(&cri).await);
        let Location::Container(found) = locator.locate(&event(100, 1, 0)).await else {
            panic!("{fixture}: not located");
        };
        assert_eq!(found.container_id, format!("{runtime}://{ID}"), "{fixture}");
        assert_eq!(
            (
                found.pod_name.as_str(),
                found.pod_namespace.as_str(),
                found.container_name.as_str()
            ),
            ("web-7d9f", "shop", "app"),
            "{fixture}"
        );
        assert_eq!(found.image, "quay.io/shop/web:1.4");
        assert_eq!(cri.status_calls(), 1);
    }
}

#[tokio::test]
async fn an_exited_process_is_found_by_its_cgroup_id_then_by_its_parent() {
    let cri = FakeCri::start("containerd").await;
    cri.add(container());
    let proc = tempfile::tempdir().unwrap();
    let cgroups = tempfile::tempdir().unwrap();
    let scope = cgroups.path().join(format!(
        "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/cri-containerd-{ID}.scope",
        UID.replace('-', "_")
    ));
    std::fs::create_dir_all(&scope).unwrap();
    let cgroup_id = std::fs::metadata(&scope).unwrap().ino();
    let locator = Locator::new(
        proc.path().into(),
        Some(cgroups.path().into()),
        client(&cri).await,
    );

    // pid 100 is gone from /proc; its cgroup is still there.
    let Location::Container(found) = locator.locate(&event(100, 1, cgroup_id)).await else {
        panic!("not located by cgroup id");
    };
    assert_eq!(found.pod_name, "web-7d9f");

    // Cgroup gone too, but the parent (a shell in the same container) is alive.
    proc_with(proc.path(), 90, "crio-systemd-v2.txt");
    let Location::Container(found) = locator.locate(&event(100, 90, 999_999_999)).await else {
        panic!("not located by parent");
    };
    assert_eq!(found.container_name, "app");
}

#[tokio::test]
async fn processes_outside_kubernetes_containers_are_told_apart() {
    let cri = FakeCri::start("cri-o").await;
    cri.add(container());
    let proc = tempfile::tempdir().unwrap();
    proc_with(proc.path(), 100, "host-sshd-v2.txt");
    proc_with(proc.path(), 101, "crio-conmon-v2.txt");
    proc_with(proc.path(), 1, "host-sshd-v2.txt");
    let locator = Locator::new(proc.path().into(), None, client(&cri).await);
    assert!(matches!(
        locator.locate(&event(100, 1, 0)).await,
        Location::Outside
    ));
    assert!(matches!(
        locator.locate(&event(101, 1, 0)).await,
        Location::Outside
    ));
    // Neither the process nor its parent nor its cgroup can be read any more.
    assert!(matches!(
        locator.locate(&event(555, 556, 0)).await,
        Location::Gone
    ));
    assert_eq!(
        cri.status_calls(),
        0,
        "the runtime is asked only about containers"
    );
}

#[tokio::test]
async fn containers_the_runtime_cannot_describe_are_unresolved() {
    let cri = FakeCri::start("containerd").await;
    let proc = tempfile::tempdir().unwrap();
    proc_with(proc.path(), 100, "containerd-systemd-v2.txt");
    let locator = Locator::new(proc.path().into(), None, client(&cri).await);

    // Unknown to the runtime (already removed).
    assert!(matches!(
        locator.locate(&event(100, 1, 0)).await,
        Location::Unresolved(CriError::NotFound(id)) if id == ID
    ));
    // Known, but not created by a kubelet.
    cri.add(FakeContainer {
        kubernetes: false,
        ..container()
    });
    let Location::Unresolved(e @ CriError::NotKubernetes { .. }) =
        locator.locate(&event(100, 1, 0)).await
    else {
        panic!("expected NotKubernetes");
    };
    assert!(e.to_string().contains("io.kubernetes."), "{e}");
    // Labels that name another pod than the cgroup does.
    cri.add(FakeContainer {
        pod_uid: "00000000-0000-4000-8000-000000000000".into(),
        ..container()
    });
    assert!(matches!(
        locator.locate(&event(100, 1, 0)).await,
        Location::Unresolved(_)
    ));
}

#[tokio::test]
async fn a_missing_runtime_socket_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("containerd.sock");
    let Err(e) = CriClient::connect(&socket, Duration::from_secs(2)).await else {
        panic!("connected to nothing");
    };
    assert!(matches!(e, CriError::Connect { .. }));
    assert!(e.to_string().contains(socket.to_str().unwrap()), "{e}");
}

#[tokio::test]
async fn the_client_reports_the_runtime_name() {
    let cri = FakeCri::start("cri-o").await;
    assert_eq!(client(&cri).await.runtime_name(), "cri-o");
}
