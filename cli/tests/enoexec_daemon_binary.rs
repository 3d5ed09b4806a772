//! `multiarch enoexec-daemon` as a process, with the real kernel: a shell execs a binary
//! built for another architecture, and the ENoExecEvent for its container appears in the
//! (fake) API server, found through a fake host /proc and a fake CRI runtime. Needs root
//! (or CAP_BPF + CAP_PERFMON); where the kernel refuses the program the test says
//! "SKIPPED: ..." on stderr.
#![allow(clippy::unwrap_used)]

use multiarch_test_support::kubeconfig;

use multiarch_test_support::fake_cri;

use std::{
    io::{BufRead, BufReader, Read, Write},
    os::unix::fs::PermissionsExt,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use kubeconfig::kubeconfig;
use multiarch_fake_apiserver::FakeApiServer;

const UID: &str = "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

/// /bin/true with the ELF machine of another CPU.
fn foreign_binary(dir: &Path) -> std::path::PathBuf {
    let mut elf = std::fs::read("/bin/true").unwrap();
    let native = u16::from_le_bytes([elf[18], elf[19]]);
    let foreign: u16 = if native == 183 { 62 } else { 183 };
    elf[18..20].copy_from_slice(&foreign.to_le_bytes());
    let path = dir.join("app");
    std::fs::write(&path, elf).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Execs a foreign binary from a process the fake host /proc places in the container's
/// cgroup; the binary's path.
fn exec_in_container(
    dir: &std::path::Path,
    proc: &std::path::Path,
    container_id: &str,
) -> std::path::PathBuf {
    // A "container process": its pid is known before it execs, so the fake host /proc can
    // place it in the container's cgroup (CRI-O, systemd driver, cgroup v2).
    let binary = foreign_binary(dir);
    let mut shell = Command::new("/bin/sh")
        .args(["-c", "echo $$; read go; exec \"$0\""])
        .arg(&binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pid = String::new();
    BufReader::new(shell.stdout.take().unwrap())
        .read_line(&mut pid)
        .unwrap();
    let pid = pid.trim();
    std::fs::create_dir_all(proc.join(pid)).unwrap();
    std::fs::write(
        proc.join(pid).join("cgroup"),
        format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice/crio-{container_id}.scope\n",
            UID.replace('-', "_")
        ),
    )
    .unwrap();
    shell.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(!shell.wait().unwrap().success());
    binary
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_exec_in_a_container_becomes_an_enoexecevent() {
    let server = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let container_id = "ab".repeat(32);
    let cri = fake_cri::FakeCri::start("cri-o").await;
    cri.add(fake_cri::FakeContainer {
        id: container_id.clone(),
        name: "app".into(),
        pod: "web".into(),
        namespace: "shop".into(),
        pod_uid: UID.into(),
        image: "quay.io/shop/web:1".into(),
        kubernetes: true,
    });
    let proc = dir.path().join("proc");
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args([
            "enoexec-daemon",
            "--node-name",
            "node-1",
            "--namespace",
            "multiarch",
        ])
        .arg(format!(
            "--runtime-endpoint=unix://{}",
            cri.socket().display()
        ))
        .arg(format!("--proc-root={}", proc.display()))
        .arg(format!("--metrics-addr=127.0.0.1:{metrics_port}"))
        .env("KUBECONFIG", kubeconfig(dir.path(), &server))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Ready once the probe is attached: the log says so (or the process exits).
    let mut stderr = BufReader::new(daemon.stderr.take().unwrap());
    let mut log = String::new();
    loop {
        let mut line = String::new();
        if stderr.read_line(&mut line).unwrap() == 0 {
            let _ = daemon.wait();
            // The kernel or the privileges refused (see ProbeError and TracefsError).
            let refused = ["loading the eBPF program failed", "attaching", "tracefs"];
            if refused.iter().any(|r| log.contains(r)) {
                assert!(
                    std::env::var_os("MULTIARCH_REQUIRE_KERNEL_TESTS").is_none(),
                    "kernel tests are required here: {log}"
                );
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: the kernel refused the eBPF program: {log}"
                );
                return;
            }
            panic!("the daemon exited: {log}");
        }
        log.push_str(&line);
        if line.contains("watching for exec format errors") {
            break;
        }
    }
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = stderr.read_to_string(&mut rest);
    });

    let binary = exec_in_container(dir.path(), &proc, &container_id);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let object = loop {
        if let Some(o) = server
            .list("multiarch.openshift.io/enoexecevents")
            .into_iter()
            .find(|o| o.get("status").is_some())
        {
            break o;
        }
        assert!(tokio::time::Instant::now() < deadline, "no ENoExecEvent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    daemon.kill().unwrap();
    let _ = daemon.wait();
    assert_eq!(
        object["metadata"]["name"],
        format!("enoexec-{container_id}")
    );
    assert_eq!(
        object["status"],
        serde_json::json!({"nodeName": "node-1", "podName": "web", "podNamespace": "shop",
                           "containerID": format!("cri-o://{container_id}"),
                           "executable": binary.to_str().unwrap()})
    );
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

#[test]
fn a_missing_runtime_socket_stops_the_daemon_with_its_path() {
    // The daemon checks the kernel first; only root gets as far as the socket.
    if !is_root() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: the runtime check comes after the kernel's, which needs root"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(FakeApiServer::start());
    let socket = dir.path().join("containerd.sock");
    let output = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["enoexec-daemon", "--node-name", "node-1"])
        .arg(format!("--runtime-endpoint={}", socket.display()))
        .env("KUBECONFIG", kubeconfig(dir.path(), &server))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach the container runtime at {}",
            socket.display()
        )),
        "{stderr}"
    );
}

#[test]
fn without_privileges_the_daemon_says_what_is_missing() {
    if !is_root() {
        let _ = writeln!(std::io::stderr(), "SKIPPED: dropping privileges needs root");
        return;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: setpriv (util-linux) is not installed"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(FakeApiServer::start());
    let config = kubeconfig(dir.path(), &server);
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let run = |setpriv: &[&str]| {
        let output = Command::new("setpriv")
            .args(setpriv)
            .arg(env!("CARGO_BIN_EXE_multiarch"))
            .args(["enoexec-daemon", "--node-name", "node-1"])
            .env("KUBECONFIG", &config)
            .output()
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // Root without any capability: the kernel refuses the program (tracefs mounted first, as
    // the kernel tests would, so that the mount is not what fails).
    if let Err(e) = multiarch_ebpf::tracefs::ensure_mounted() {
        let _ = writeln!(std::io::stderr(), "SKIPPED: cannot mount tracefs: {e}");
        return;
    }
    let stderr = run(&["--bounding-set=-all", "--inh-caps=-all", "--"]);
    assert!(
        stderr
            .contains("loading the eBPF program failed (the daemon needs CAP_BPF and CAP_PERFMON"),
        "{stderr}"
    );
    // Not root: tracefs cannot even be read.
    let stderr = run(&[
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--",
    ]);
    assert!(
        stderr.contains("needs to run as root") || stderr.contains("needs CAP_SYS_ADMIN"),
        "{stderr}"
    );
}
