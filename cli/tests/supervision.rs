//! The whole process handles a dying task: `multiarch scheduler` against the fake API
//! server, with a panic injected into its pod watch (debug builds read
//! MULTIARCH_DEBUG_PANIC_IN_TASK), exits non-zero, naming the task, instead of running
//! on "ready" without a watch. And a SIGTERM ends it cleanly.
#![allow(clippy::unwrap_used)]

use multiarch_test_support::kubeconfig;

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use kubeconfig::kubeconfig;
use multiarch_fake_apiserver::FakeApiServer;

fn scheduler(kubeconfig: &Path, panic_in: Option<&str>) -> std::process::Child {
    let mut command = Command::new(env!("CARGO_BIN_EXE_multiarch"));
    command
        .args([
            "scheduler",
            "--leader-elect",
            "false",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("MULTIARCH_DEBUG_PANIC_IN_TASK")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(task) = panic_in {
        command.env("MULTIARCH_DEBUG_PANIC_IN_TASK", task);
    }
    command.spawn().unwrap()
}

/// Waits for the process to end (killing it after `limit`); its exit status and stderr.
async fn finish(
    mut child: std::process::Child,
    limit: Duration,
) -> (std::process::ExitStatus, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
            return (status, stderr);
        }
        if started.elapsed() > limit {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_watch_task_ends_the_process_with_a_failure() {
    let server = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &server);
    let child = scheduler(&config, Some("pod watch"));
    let (status, stderr) = finish(child, Duration::from_secs(60)).await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("pod watch panicked: injected by MULTIARCH_DEBUG_PANIC_IN_TASK"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_scheduler_cleanly() {
    let server = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &server);
    let child = scheduler(&config, None);
    // Running: it has listed the nodes (its informers are up).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server
        .requests()
        .iter()
        .any(|r| r.starts_with("GET /api/v1/nodes"))
    {
        assert!(
            Instant::now() < deadline,
            "the scheduler never listed nodes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = i32::try_from(child.id()).unwrap();
    // The kubelet's SIGTERM.
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let (status, stderr) = finish(child, Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "{stderr}");
}
