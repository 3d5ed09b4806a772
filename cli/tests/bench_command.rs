//! `multiarch bench` against the fake API server, at 100 nodes × 500 pods: the scheduler
//! started by the bench (pre-created pods), then the bind-only baseline, every field of
//! the report, and nothing left behind.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::kubeconfig;

use std::process::Command;

use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault};

const PLATFORMS: &str = "images:
  quay.io/shop/web:1: [linux/amd64, linux/arm64]
  quay.io/shop/legacy:1: [linux/amd64]
  quay.io/edge/inference:1: [linux/arm64]
  quay.io/mainframe/batch:1: [linux/s390x]
  quay.io/power/db:1: [linux/ppc64le, linux/s390x]
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_and_the_bind_only_baseline_are_measured_and_cleaned_up() {
    let Setup {
        server,
        kubeconfig,
        platforms,
        _dir,
    } = Setup::new().await;
    let mut command = bench_with_scheduler(
        &kubeconfig,
        &platforms,
        &[
            "--nodes",
            "100",
            "--pods",
            "500",
            "--timeout",
            "120s",
            "--compare-bind-only",
        ],
    );
    // The scheduler's client as fast as the bench's.
    command.args(["--kube-api-qps", "5000", "--kube-api-burst", "5000"]);
    let report = report_of(command).await;
    assert_eq!(report["nodes"], 100);
    assert_eq!(report["pods"], 500);
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let (scheduler, baseline) = (&runs[0], &runs[1]);
    assert_eq!(scheduler["placer"], "scheduler");
    assert_eq!(baseline["placer"], "bind-only");
    for run in runs {
        assert_eq!(run["bound"], 500, "{run}");
        for field in [
            "podsPerSecond",
            "podsPerSecondFirstToLast",
            "latencyP50Ms",
            "latencyP99Ms",
        ] {
            assert!(run[field].as_f64().unwrap() > 0.0, "{field}: {run}");
        }
        // One binding and one event per pod, as a scheduler writes.
        let requests = &run["requestsPerPod"];
        assert_eq!(requests["POST pods/binding"], 1.0, "{run}");
        assert_eq!(requests["POST events"], 1.0, "{run}");
    }
    // The scheduler places by architecture; round-robin binding does not.
    assert_eq!(scheduler["incompatible"], 0, "{scheduler}");
    assert!(baseline["incompatible"].as_u64().unwrap() > 0, "{baseline}");
    let process = &scheduler["process"];
    assert!(
        process["peakRssBytes"].as_u64().unwrap() > 1_000_000,
        "{scheduler}"
    );
    assert!(process["cpuSeconds"].as_f64().unwrap() >= 0.0);
    let ratio = report["ratioToBindOnly"].as_f64().unwrap();
    let expected =
        scheduler["podsPerSecond"].as_f64().unwrap() / baseline["podsPerSecond"].as_f64().unwrap();
    assert!((ratio - expected).abs() < 1e-9);
    // Nothing of the run is left.
    assert!(server.list("pods").is_empty());
    assert!(server.list("nodes").is_empty());
    assert!(
        server
            .list("namespaces")
            .iter()
            .all(|n| n["metadata"]["name"] != "multiarch-bench")
    );
}

/// SIGTERM (or Ctrl-C) in the middle of a run: the objects are still removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_run_removes_what_it_created() {
    let Setup {
        server,
        kubeconfig,
        platforms,
        _dir,
    } = Setup::new().await;
    // A "scheduler" that never binds: the run waits until it is interrupted.
    let mut child = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["bench", "--kubeconfig", &kubeconfig])
        .args(["--platforms", &platforms])
        .args([
            "--nodes",
            "10",
            "--pods",
            "20",
            "--timeout",
            "600s",
            "--",
            "sleep",
            "600",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while server.list("pods").len() < 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the pods were never created"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(server.list("nodes").len(), 10);
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = tokio::task::spawn_blocking(move || {
        let status = child.wait().unwrap();
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        (status, stderr)
    })
    .await
    .unwrap();
    assert_eq!(out.0.code(), Some(1), "{}", out.1);
    assert!(out.1.contains("interrupted"), "{}", out.1);
    assert!(server.list("pods").is_empty());
    assert!(server.list("nodes").is_empty());
}

/// Without the ClusterPodPlacementConfig CRD, `multiarch scheduler` waits 30 s before
/// scheduling with defaults: the bench says so before the run is read as slow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_placement_crd_is_reported_before_the_run() {
    let Setup {
        server,
        kubeconfig,
        platforms,
        _dir,
    } = Setup::new().await;
    server.inject(Fault::new(
        None,
        "clusterpodplacementconfigs",
        Effect::Status(404),
    ));
    // A "scheduler" that never binds: the run ends at its timeout.
    let mut command = Command::new(env!("CARGO_BIN_EXE_multiarch"));
    command
        .args(["bench", "--kubeconfig", &kubeconfig])
        .args(["--platforms", &platforms])
        .args(["--nodes", "1", "--pods", "1", "--timeout", "1s"])
        .args(["--", "sleep", "600"]);
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the ClusterPodPlacementConfig CRD is not installed"),
        "{stderr}"
    );
    assert!(stderr.contains("not bound within"), "{stderr}");
}

/// A fake API server, with a kubeconfig and a platforms file for it in a directory that
/// lives as long as this.
struct Setup {
    server: FakeApiServer,
    _dir: tempfile::TempDir,
    kubeconfig: String,
    platforms: String,
}

impl Setup {
    async fn new() -> Self {
        let server = FakeApiServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = kubeconfig::kubeconfig(dir.path(), &server);
        let platforms = dir.path().join("platforms.yaml");
        std::fs::write(&platforms, PLATFORMS).unwrap();
        Setup {
            server,
            kubeconfig: kubeconfig.to_str().unwrap().to_owned(),
            platforms: platforms.to_str().unwrap().to_owned(),
            _dir: dir,
        }
    }
}

/// Runs `command` (off the runtime's threads) and returns its JSON report, once it has
/// succeeded without warning that the fake lacks the CRD.
async fn report_of(mut command: Command) -> serde_json::Value {
    let out = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("CRD is not installed"),
        "the fake serves the CRD"
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The bench's arguments for a started `multiarch scheduler`, `extra` before the `--`.
fn bench_with_scheduler(kubeconfig: &str, platforms: &str, extra: &[&str]) -> Command {
    let binary = env!("CARGO_BIN_EXE_multiarch");
    let mut command = Command::new(binary);
    command
        .args([
            "bench",
            "--kubeconfig",
            kubeconfig,
            "--platforms",
            platforms,
        ])
        .args(extra)
        .args(["-o", "json", "--"])
        .args([binary, "scheduler", "--kubeconfig", kubeconfig])
        .args(["--image-platforms", platforms, "--leader-elect", "false"])
        .args(["--metrics-addr", "127.0.0.1:0"]);
    command
}

/// `--create-rate` with a scheduler the bench starts: the scheduler places a warm-up pod
/// first, then the run's pods are created at the rate, timed from their creation; the
/// report says the rate asked for and the one reached. Twice in the same namespace:
/// nothing of the first run (pods, the warm-up pod, events, the namespace) is left to
/// hinder the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_created_live_meet_a_started_scheduler_after_its_warm_up() {
    let Setup {
        server,
        kubeconfig,
        platforms,
        _dir,
    } = Setup::new().await;
    for round in 0..2 {
        let command = bench_with_scheduler(
            &kubeconfig,
            &platforms,
            &[
                "--nodes",
                "20",
                "--pods",
                "100",
                "--create-rate",
                "200",
                "--timeout",
                "120s",
            ],
        );
        let report = report_of(command).await;
        assert_eq!(report["createRate"], 200.0, "{report}");
        let run = &report["runs"][0];
        assert_eq!(run["placer"], "scheduler", "{report}");
        // The warm-up pod is not one of the run's.
        assert_eq!(run["pods"], 100, "{run}");
        assert_eq!(run["bound"], 100, "{run}");
        assert_eq!(run["incompatible"], 0, "{run}");
        assert!(run["createdPerSecond"].as_f64().unwrap() > 0.0, "{run}");
        assert!(server.list("pods").is_empty(), "round {round}");
        assert!(server.list("nodes").is_empty(), "round {round}");
        assert!(
            server
                .list("events")
                .iter()
                .all(|e| e["metadata"]["namespace"] != "multiarch-bench"),
            "round {round}: the run's events are deleted with its namespace"
        );
        assert!(
            server
                .list("namespaces")
                .iter()
                .all(|n| n["metadata"]["name"] != "multiarch-bench"),
            "round {round}"
        );
    }
}

/// A started "scheduler" that never places the warm-up pod: the run ends at its timeout
/// (one that exits: at once, with its exit status), says why, and removes the warm-up
/// pod and the nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_that_places_no_warm_up_pod_is_reported() {
    let cases: [(&str, &[&str], &str); 2] = [
        (
            "2s",
            &["sleep", "600"],
            "the scheduler placed no warm-up pod within 2s",
        ),
        (
            "600s",
            &["sh", "-c", "exit 3"],
            "the scheduler exited before placing the warm-up pod (exit status: 3)",
        ),
    ];
    for (timeout, scheduler, expected) in cases {
        let Setup {
            server,
            kubeconfig,
            platforms,
            _dir,
        } = Setup::new().await;
        let mut command = Command::new(env!("CARGO_BIN_EXE_multiarch"));
        command
            .args(["bench", "--kubeconfig", &kubeconfig])
            .args(["--platforms", &platforms])
            .args(["--nodes", "2", "--pods", "5", "--create-rate", "10"])
            .args(["--timeout", timeout, "--"])
            .args(scheduler);
        let out = tokio::task::spawn_blocking(move || command.output().unwrap())
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(server.list("pods").is_empty(), "{expected}");
        assert!(server.list("nodes").is_empty(), "{expected}");
    }
}
