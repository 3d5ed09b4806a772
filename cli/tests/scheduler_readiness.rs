//! `multiarch scheduler` with `--inspector-endpoint` is ready only while the inspector
//! answers: against the fake API server, with the inspector's port closed it reports
//! not ready and says why on its own pod; once an inspector serves there, it is ready and
//! says so.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::{kubeconfig, table_inspector};

use std::{
    io::{Read, Write},
    process::{Command, Stdio},
    time::Duration,
};

use multiarch_fake_apiserver::FakeApiServer;
use multiarch_inspector::grpc::{self, ServiceLimits};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const POD: &str = "multiarch-scheduler-6b7c9-m4k2p";

fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// `/readyz`'s status line, or `None` while nothing listens.
fn readyz(address: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(
        stream,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response.lines().next().map(str::to_owned)
}

fn condition(server: &FakeApiServer) -> Option<Value> {
    server.get("pods", "multiarch", POD)?["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "multiarch.openshift.io/inspector-reachable")
        .cloned()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_is_ready_only_while_the_inspector_answers() {
    let server = FakeApiServer::start().await;
    server.apply(
        "pods",
        json!({"metadata": {"name": POD, "namespace": "multiarch"},
            "spec": {"containers": [{"name": "scheduler", "image": "multiarch:1"}]},
            "status": {"phase": "Running"}}),
    );
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig::kubeconfig(dir.path(), &server);
    let (inspector, metrics) = (free_address(), free_address());
    let mut scheduler = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["scheduler", "--leader-elect", "false"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--metrics-addr", &metrics])
        .args(["--inspector-endpoint", &format!("http://{inspector}")])
        .env("POD_NAME", POD)
        .env("POD_NAMESPACE", "multiarch")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    eventually("the pod saying the inspector is unreachable", || {
        condition(&server)
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "InspectorUnreachable")
    })
    .await;
    assert_eq!(
        readyz(&metrics).as_deref(),
        Some("HTTP/1.1 503 Service Unavailable")
    );

    let listener = tokio::net::TcpListener::bind(&inspector).await.unwrap();
    let stop = CancellationToken::new();
    let mut limits = ServiceLimits::default();
    limits.connections.shutdown_delay = Duration::ZERO;
    let served = tokio::spawn(grpc::serve(
        listener,
        None,
        table_inspector::standard(),
        limits,
        stop.clone(),
    ));
    eventually("the pod saying the inspector answers", || {
        condition(&server).is_some_and(|c| c["status"] == "True")
    })
    .await;
    eventually("ready", || {
        readyz(&metrics).as_deref() == Some("HTTP/1.1 200 OK")
    })
    .await;

    scheduler.kill().unwrap();
    scheduler.wait().unwrap();
    stop.cancel();
    served.await.unwrap();
}
