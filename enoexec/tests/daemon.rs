//! `multiarch enoexec-daemon`'s pipeline against the fake API server and a fake CRI runtime:
//! kernel records (as the probe decodes them) in, `ENoExecEvent`s out, with burst
//! de-duplication, rate limiting, a bounded queue and the outcomes counted.
#![allow(clippy::unwrap_used)]

use multiarch_test_support::fake_cri;
use multiarch_test_support::rbac;

use std::{path::Path, time::Duration};

use fake_cri::{FakeContainer, FakeCri};
use multiarch_ebpf::{
    cri::CriClient,
    event::{DecodeError, ExecEvent, ExecSyscall},
    locate::Locator,
};
use multiarch_enoexec::daemon::{Daemon, DaemonOptions, metrics::DaemonMetrics};
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_runtime::supervisor::Supervisor;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const UID: &str = "6f1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

fn id(n: u32) -> String {
    format!("{n:064x}")
}

fn container(n: u32) -> FakeContainer {
    FakeContainer {
        id: id(n),
        name: format!("app{n}"),
        pod: "web-7d9f".into(),
        namespace: "shop".into(),
        pod_uid: UID.into(),
        image: "quay.io/shop/web:1.4".into(),
        kubernetes: true,
    }
}

/// Host `/proc/<pid>/cgroup` for a process in container `n` (systemd driver, containerd).
fn in_container(proc: &Path, pid: u32, n: u32) {
    let dir = proc.join(pid.to_string());
    std::fs::create_dir_all(&dir).unwrap();
    let uid = UID.replace('-', "_");
    std::fs::write(
        dir.join("cgroup"),
        format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{uid}.slice/cri-containerd-{}.scope\n", id(n)),
    )
    .unwrap();
}

fn event(pid: u32) -> ExecEvent {
    ExecEvent {
        pid,
        tgid: pid,
        ppid: 1,
        ret: -8,
        cgroup_id: 0,
        syscall: ExecSyscall::Execve,
        comm: "runc:[2:INIT]".into(),
        filename: Some("/app".into()),
    }
}

struct Setup {
    server: FakeApiServer,
    cri: FakeCri,
    proc: tempfile::TempDir,
    metrics: DaemonMetrics,
    /// Keeps the daemon's writer running for the test.
    supervisor: Supervisor,
}

impl Setup {
    async fn new(runtime: &'static str) -> Self {
        Self {
            server: FakeApiServer::start().await,
            cri: FakeCri::start(runtime).await,
            proc: tempfile::tempdir().unwrap(),
            metrics: DaemonMetrics::default(),
            supervisor: Supervisor::new(CancellationToken::new()),
        }
    }

    async fn daemon(&self, rate: f64, burst: u32, queue: usize) -> Daemon<CriClient> {
        self.daemon_reading_logs_every(rate, burst, queue, Duration::from_millis(10))
            .await
    }

    async fn daemon_reading_logs_every(
        &self,
        rate: f64,
        burst: u32,
        queue: usize,
        log_read_interval: Duration,
    ) -> Daemon<CriClient> {
        let client =
            kube::Client::try_from(kube::Config::new(self.server.url().parse().unwrap())).unwrap();
        let runtime = CriClient::connect(self.cri.socket(), Duration::from_secs(5))
            .await
            .unwrap();
        let locator = Locator::new(self.proc.path().into(), None, runtime);
        let options = DaemonOptions {
            node_name: "arm-1".into(),
            namespace: "multiarch".into(),
            rate,
            burst,
            dedup_window: Duration::from_secs(60),
            queue_capacity: queue,
            retry_backoff: Duration::from_millis(10),
            log_read_interval,
        };
        Daemon::start(
            client,
            locator,
            options,
            self.metrics.clone(),
            &self.supervisor.tasks(),
        )
    }

    /// The writer counts a report after the API server has it: wait for the count.
    async fn counted(&self, outcome: &'static str, count: u64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while self.metrics.get(outcome) < count {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{outcome} never reached {count}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn objects(&self) -> Vec<serde_json::Value> {
        self.server.list("multiarch.openshift.io/enoexecevents")
    }

    async fn wait_for_objects(&self, count: usize) -> Vec<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let objects = self.objects();
            if objects.len() >= count && objects.iter().all(|o| o.get("status").is_some()) {
                return objects;
            }
            assert!(tokio::time::Instant::now() < deadline, "{objects:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test]
async fn a_container_error_becomes_an_enoexecevent_with_its_pod() {
    for runtime in ["containerd", "cri-o"] {
        let s = Setup::new(runtime).await;
        s.cri.add(container(1));
        in_container(s.proc.path(), 100, 1);
        let daemon = s.daemon(100.0, 10, 16).await;
        daemon.handle(Ok(event(100))).await;
        let objects = s.wait_for_objects(1).await;
        let object = &objects[0];
        assert_eq!(object["metadata"]["name"], format!("enoexec-{}", id(1)));
        assert_eq!(object["metadata"]["namespace"], "multiarch");
        assert_eq!(
            object["metadata"]["labels"]["multiarch.openshift.io/node"],
            "arm-1"
        );
        assert_eq!(
            object["status"],
            json!({"nodeName": "arm-1", "podName": "web-7d9f", "podNamespace": "shop",
                   "containerID": format!("{runtime}://{}", id(1)), "executable": "/app"})
        );
        // Create (status ignored by the server), then the status subresource.
        let writes: Vec<String> = s
            .server
            .requests()
            .into_iter()
            .filter(|r| r.contains("enoexecevents"))
            .collect();
        assert_eq!(
            writes,
            [
                "POST /apis/multiarch.openshift.io/v1beta1/namespaces/multiarch/enoexecevents"
                    .to_owned(),
                format!(
                    "PATCH /apis/multiarch.openshift.io/v1beta1/namespaces/multiarch/enoexecevents/enoexec-{}/status",
                    id(1)
                ),
            ]
        );
        s.counted("reported", 1).await;
        assert_eq!(s.metrics.get("reported"), 1);
    }
}

#[tokio::test]
async fn the_daemon_role_grants_every_call_the_daemon_makes() {
    let s = Setup::new("containerd").await;
    s.cri.add(container(1));
    s.cri.add(container(2));
    in_container(s.proc.path(), 100, 1);
    in_container(s.proc.path(), 200, 2);
    // A success, then a failed status write (create, patch, delete).
    let daemon = s.daemon(100.0, 10, 16).await;
    daemon.handle(Ok(event(100))).await;
    s.wait_for_objects(1).await;
    s.server.fail_next_patches(500, 3);
    daemon.handle(Ok(event(200))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.metrics.get("write_failed") == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rules = rbac::rules(&[multiarch_operator::install::enoexec_daemon_rules()]);
    rbac::assert_granted(&rules, &s.server.requests());
    assert!(s.server.requests().iter().any(|r| r.starts_with("DELETE ")));
    // The check itself fails when a permission is missing.
    let without_delete = rbac::rules(&[json!([rules[1].clone(), {
        "apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents"], "verbs": ["create"]}])]);
    let requests = s.server.requests();
    assert!(std::panic::catch_unwind(|| rbac::assert_granted(&without_delete, &requests)).is_err());
}

#[tokio::test]
async fn bursts_from_one_container_are_reported_once_without_asking_the_runtime_again() {
    let s = Setup::new("containerd").await;
    s.cri.add(container(1));
    s.cri.add(container(2));
    in_container(s.proc.path(), 100, 1);
    in_container(s.proc.path(), 101, 1);
    in_container(s.proc.path(), 200, 2);
    let daemon = s.daemon(100.0, 10, 16).await;
    for pid in [100, 101, 100, 200, 101] {
        daemon.handle(Ok(event(pid))).await;
    }
    s.wait_for_objects(2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(s.objects().len(), 2);
    s.counted("reported", 2).await;
    assert_eq!(s.metrics.get("reported"), 2);
    assert_eq!(s.metrics.get("duplicate"), 3);
    assert_eq!(s.cri.status_calls(), 2);
}

#[tokio::test]
async fn host_processes_vanished_processes_and_bad_records_are_counted_not_reported() {
    let s = Setup::new("containerd").await;
    let host = s.proc.path().join("300");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("cgroup"), "0::/system.slice/ssh.service\n").unwrap();
    in_container(s.proc.path(), 400, 9); // a container the runtime no longer knows
    let daemon = s.daemon(100.0, 10, 16).await;
    daemon.handle(Ok(event(300))).await;
    daemon.handle(Ok(event(12345))).await;
    daemon.handle(Ok(event(400))).await;
    daemon.handle(Err(DecodeError::Size(7))).await;
    // The runtime now knows the container: its next event is reported, not a duplicate.
    s.cri.add(container(9));
    daemon.handle(Ok(event(400))).await;
    s.counted("reported", 1).await;
    assert_eq!(s.objects().len(), 1, "only the container the runtime knows");
    for outcome in [
        "outside_container",
        "process_gone",
        "unresolved",
        "undecodable",
    ] {
        assert_eq!(s.metrics.get(outcome), 1, "{outcome}");
    }
    assert_eq!(s.metrics.get("duplicate"), 0);
}

#[tokio::test]
async fn writes_are_rate_limited() {
    let s = Setup::new("containerd").await;
    for n in 1..=3 {
        s.cri.add(container(n));
        in_container(s.proc.path(), 100 + n, n);
    }
    // One write at once, then one per second.
    let daemon = s.daemon(1.0, 1, 16).await;
    for n in 1..=3 {
        daemon.handle(Ok(event(100 + n))).await;
    }
    s.wait_for_objects(1).await;
    assert_eq!(
        s.objects().len(),
        1,
        "the 2nd write waits for a token (~1 s)"
    );
    s.wait_for_objects(3).await;
    s.counted("reported", 3).await;
    assert_eq!(s.metrics.get("reported"), 3);
}

#[tokio::test]
async fn a_full_queue_drops_and_counts() {
    let s = Setup::new("containerd").await;
    for n in 1..=6 {
        s.cri.add(container(n));
        in_container(s.proc.path(), 100 + n, n);
    }
    // One token, refilled every 100 s: one write, one waiting for a token, one queued.
    let daemon = s.daemon(0.01, 1, 1).await;
    for n in 1..=6 {
        daemon.handle(Ok(event(100 + n))).await;
    }
    s.wait_for_objects(1).await;
    assert!(
        s.metrics.get("queue_full") >= 3,
        "{}",
        s.metrics.get("queue_full")
    );
    assert_eq!(s.objects().len(), 1);
}

#[tokio::test]
async fn an_object_left_by_a_previous_daemon_is_not_written_twice() {
    let s = Setup::new("containerd").await;
    s.cri.add(container(1));
    in_container(s.proc.path(), 100, 1);
    s.server.apply(
        "multiarch.openshift.io/enoexecevents",
        json!({"metadata": {"name": format!("enoexec-{}", id(1)), "namespace": "multiarch"}}),
    );
    let daemon = s.daemon(100.0, 10, 16).await;
    daemon.handle(Ok(event(100))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.metrics.get("duplicate") == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!s.server.requests().iter().any(|r| r.ends_with("/status")));
}

#[tokio::test]
async fn a_failed_write_is_retried() {
    let s = Setup::new("containerd").await;
    s.cri.add(container(1));
    in_container(s.proc.path(), 100, 1);
    // 500: kube's client already retries 503 and 429 itself.
    s.server.fail_next_patches(500, 1);
    let daemon = s.daemon(100.0, 10, 16).await;
    daemon.handle(Ok(event(100))).await;
    let objects = s.wait_for_objects(1).await;
    assert_eq!(objects[0]["status"]["podName"], "web-7d9f");
    s.counted("reported", 1).await;
    assert_eq!(s.metrics.get("reported"), 1);
    assert_eq!(s.metrics.get("write_failed"), 0);
    // First attempt: create, status refused, delete; second: create, status.
    let methods: Vec<String> = s
        .server
        .requests()
        .into_iter()
        .filter(|r| r.contains("enoexecevents"))
        .map(|r| r.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(methods, ["POST", "PATCH", "DELETE", "POST", "PATCH"]);
}

#[tokio::test]
async fn an_object_whose_status_cannot_be_written_is_deleted_again() {
    let s = Setup::new("containerd").await;
    s.cri.add(container(1));
    in_container(s.proc.path(), 100, 1);
    // Every attempt fails.
    s.server.fail_next_patches(500, 3);
    let daemon = s.daemon(100.0, 10, 16).await;
    daemon.handle(Ok(event(100))).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s.metrics.get("write_failed") == 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(s.objects().is_empty(), "{:?}", s.objects());
    assert!(s.server.requests().iter().any(|r| r.starts_with("DELETE ")));
}

fn exit_127(pid: u32) -> ExecEvent {
    ExecEvent {
        ret: 127,
        syscall: ExecSyscall::ExitGroup,
        comm: "app".into(),
        filename: None,
        ..event(pid)
    }
}

/// A CRI log of container `n` with these (stream, text) lines; the runtime gives its path.
fn log_of(s: &Setup, n: u32, lines: &[(&str, &str)]) -> std::path::PathBuf {
    let path = s.proc.path().join(format!("container-{n}.log"));
    let text: String = lines
        .iter()
        .map(|(stream, text)| format!("2026-11-29T10:00:00.000000000Z {stream} F {text}\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    s.cri.set_log_path(&id(n), &path);
    path
}

#[tokio::test]
async fn an_exit_with_127_is_reported_when_the_log_shows_the_loaders_refusal() {
    let s = Setup::new("containerd").await;
    for n in 1..=3 {
        s.cri.add(container(n));
        in_container(s.proc.path(), 100 + n, n);
    }
    // 1: the loader refused the CPU; 2: a shell's "command not found"; 3: no log at all.
    log_of(
        &s,
        1,
        &[
            ("stdout", "starting"),
            ("stderr", "/bin/app: CPU ISA level is lower than required"),
        ],
    );
    log_of(&s, 2, &[("stderr", "sh: 1: app: not found")]);
    s.cri
        .set_log_path(&id(3), &s.proc.path().join("not-mounted/0.log"));
    let daemon = s.daemon(100.0, 10, 16).await;
    for n in 1..=3 {
        daemon.handle(Ok(exit_127(100 + n))).await;
    }
    s.counted("loader_refusal", 1).await;
    s.counted("exit_127_other", 1).await;
    s.counted("log_unreadable", 1).await;
    let objects = s.wait_for_objects(1).await;
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert_eq!(
        objects[0]["status"],
        json!({"nodeName": "arm-1", "podName": "web-7d9f", "podNamespace": "shop",
               "containerID": format!("containerd://{}", id(1)),
               "loaderError": "/bin/app: CPU ISA level is lower than required"})
    );
    // A loader refusal is not an exec format error: `reported` (which the exec format
    // error alert follows) stays at zero.
    assert_eq!(s.metrics.get("reported"), 0);
}

#[tokio::test]
async fn a_loader_line_the_runtime_writes_late_is_still_found() {
    let s = Setup::new("containerd").await;
    s.cri.add(container(1));
    in_container(s.proc.path(), 101, 1);
    let path = log_of(&s, 1, &[("stdout", "starting")]);
    // Five reads, a second apart: the line, written at once after the event, arrives
    // before the last read however busy the machine.
    let daemon = s
        .daemon_reading_logs_every(100.0, 10, 16, Duration::from_secs(1))
        .await;
    daemon.handle(Ok(exit_127(101))).await;
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(
        "2026-11-29T10:00:00.1Z stderr F Fatal glibc error: CPU does not support x86-64-v3\n",
    );
    std::fs::write(&path, text).unwrap();
    s.counted("loader_refusal", 1).await;
    let objects = s.wait_for_objects(1).await;
    assert_eq!(
        objects[0]["status"]["loaderError"],
        "Fatal glibc error: CPU does not support x86-64-v3"
    );
}

#[tokio::test]
async fn exits_and_exec_format_errors_of_one_container_are_deduplicated_apart() {
    let s = Setup::new("containerd").await;
    s.cri.add(container(1));
    in_container(s.proc.path(), 101, 1);
    log_of(&s, 1, &[("stderr", "sh: 1: app: not found")]);
    let daemon = s.daemon(100.0, 10, 16).await;
    // A "command not found", again within the window, then an exec format error.
    daemon.handle(Ok(exit_127(101))).await;
    daemon.handle(Ok(exit_127(101))).await;
    daemon.handle(Ok(event(101))).await;
    s.counted("reported", 1).await;
    s.counted("exit_127_other", 1).await;
    assert_eq!(s.metrics.get("duplicate"), 1);
    let objects = s.wait_for_objects(1).await;
    assert_eq!(objects[0]["status"]["executable"], "/app");
    // Outside containers, an exit with 127 is nobody's failure: not even counted.
    let host = s.proc.path().join("300");
    std::fs::create_dir_all(&host).unwrap();
    std::fs::write(host.join("cgroup"), "0::/system.slice/ssh.service\n").unwrap();
    daemon.handle(Ok(exit_127(300))).await;
    assert_eq!(s.metrics.get("outside_container"), 0);
}

/// Log reads wait for the runtime; they run apart from the writer, so exits by the dozen
/// (a tenant's "command not found" loop) never hold an exec format error's report.
#[tokio::test]
async fn exits_being_read_never_hold_an_exec_format_errors_report() {
    let s = Setup::new("containerd").await;
    for n in 1..=4 {
        s.cri.add(container(n));
        in_container(s.proc.path(), 100 + n, n);
    }
    for n in 1..=3 {
        log_of(&s, n, &[("stderr", "sh: 1: app: not found")]);
    }
    // Each exit's five reads take 40 s here.
    let daemon = s
        .daemon_reading_logs_every(100.0, 10, 16, Duration::from_secs(10))
        .await;
    for n in 1..=3 {
        daemon.handle(Ok(exit_127(100 + n))).await;
    }
    daemon.handle(Ok(event(104))).await;
    s.counted("reported", 1).await;
    assert_eq!(s.metrics.get("exit_127_other"), 0);
    assert_eq!(s.objects().len(), 1);
}
