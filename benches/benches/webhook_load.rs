//! `multiarch webhook` under load on loopback: a fixed rate of the recorded AdmissionReview
//! over TLS (keep-alive connections), latency measured from each request's scheduled time
//! (no coordinated omission), and the server's resident memory before and after. Three
//! phases: routing only (no inspector), routing with the architecture constraint from a
//! warm inspector (answers at once over gRPC, as its cache does), and with a cold one
//! (answers after 1 s: every review waits the 200 ms admission deadline).
//! Run: `cargo build --release --bin multiarch && cargo bench -p multiarch-benches --bench
//! webhook_load` (about 6 minutes).

#![allow(clippy::unwrap_used)] // a benchmark driver: a failure is a failed run

use std::{
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use multiarch_inspector::{
    ImageInfo, ImageInspector, InspectError, InspectRequest, grpc::InspectorService,
};
use multiarch_test_support::table_inspector::linux_index;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::mpsc,
};

/// An inspector that answers every image with amd64 and arm64 after `delay`.
struct FixedInspector {
    delay: Duration,
}

#[async_trait::async_trait]
impl ImageInspector for FixedInspector {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        // A zero sleep would still wait for the timer wheel's next tick.
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        Ok(Arc::new(linux_index(&request.image, &["amd64", "arm64"])))
    }
}

/// Serves `inspector` over gRPC on a free loopback port; returns its endpoint.
async fn grpc_inspector(inspector: FixedInspector) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(InspectorService::new(Arc::new(inspector)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

struct Phase {
    name: &'static str,
    inspector: Option<String>,
    rate: u64,
    total: u64,
    /// Keep-alive connections (the API server opens more when answers are slow).
    connections: usize,
    /// TLS connections opened before the measurement and left idle (a slow or hostile
    /// client), held open throughout it.
    idle: usize,
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn certificate(dir: &std::path::Path) -> String {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca.pem()
}

async fn read_response(stream: &mut (impl AsyncReadExt + Unpin), buffer: &mut Vec<u8>) -> bool {
    buffer.clear();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                return head.starts_with("http/1.1 200");
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = !std::env::args().any(|a| a == "--bench");
    let scale = |full: u64, short: u64| if quick { short } else { full };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("multiarch-webhook-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = certificate(&dir);
    let warm = grpc_inspector(FixedInspector {
        delay: Duration::ZERO,
    })
    .await;
    let cold = grpc_inspector(FixedInspector {
        delay: Duration::from_secs(1),
    })
    .await;
    let phases = [
        Phase {
            name: "routing only",
            inspector: None,
            rate: 500,
            total: scale(100_000, 500),
            connections: 16,
            idle: 0,
        },
        Phase {
            name: "with the constraint, warm inspector",
            inspector: Some(warm),
            rate: 500,
            total: scale(30_000, 300),
            connections: 16,
            idle: 0,
        },
        Phase {
            name: "cold inspector (200 ms deadline)",
            inspector: Some(cold),
            rate: 50,
            total: scale(3_000, 50),
            connections: 32,
            idle: 0,
        },
        // Within the server's 10 s request-head timeout, which would close them.
        Phase {
            name: "routing only, with idle TLS connections held open",
            inspector: None,
            rate: 500,
            total: scale(4_000, 300),
            connections: 16,
            idle: usize::try_from(scale(1_000, 100)).unwrap(),
        },
    ];
    // `WEBHOOK_BENCH_PHASE=2` runs the second phase alone.
    let only: Option<usize> = std::env::var("WEBHOOK_BENCH_PHASE")
        .ok()
        .and_then(|p| p.parse().ok());
    for (i, phase) in phases.iter().enumerate() {
        if only.is_none_or(|n| n == i + 1) {
            run_phase(&dir, &ca, phase).await;
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The webhook binary, serving on a free port, and that port (once it accepts).
async fn start_webhook(dir: &std::path::Path, phase: &Phase) -> (std::process::Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let exe = std::env::current_exe().unwrap();
    let binary = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("multiarch");
    assert!(
        binary.exists(),
        "{} is missing: build it first (cargo build --release --bin multiarch)",
        binary.display()
    );
    let mut command = Command::new(&binary);
    command
        .args([
            "webhook",
            "--no-kubernetes",
            "--mode",
            "Scheduler",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .arg("--cert")
        .arg(dir.join("tls.crt"))
        .arg("--key")
        .arg(dir.join("tls.key"));
    if let Some(endpoint) = &phase.inspector {
        command.args(["--inspector-endpoint", endpoint]);
    }
    let server = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (server, port)
}

/// A TLS client trusting `ca`.
fn tls_connector(ca: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    tokio_rustls::TlsConnector::from(Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// `count` TLS connections to the webhook, left idle.
async fn open_idle(connector: &tokio_rustls::TlsConnector, port: u16, count: usize) -> Vec<Tls> {
    let mut idle = Vec::with_capacity(count);
    for _ in 0..count {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        idle.push(
            connector
                .connect("127.0.0.1".try_into().unwrap(), tcp)
                .await
                .unwrap(),
        );
    }
    idle
}

/// How many of `idle` the server still holds open: a closed one reads EOF at once.
async fn still_open(idle: &mut [Tls]) -> usize {
    let mut still_open = 0;
    for connection in idle {
        let mut byte = [0u8; 1];
        if tokio::time::timeout(Duration::from_millis(1), connection.read(&mut byte))
            .await
            .is_err()
        {
            still_open += 1;
        }
    }
    still_open
}

async fn run_phase(dir: &std::path::Path, ca: &str, phase: &Phase) {
    let total = phase.total;
    let (mut server, port) = start_webhook(dir, phase).await;
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/admission/admissionreview-request-0.json");
    let body = std::fs::read(fixture).unwrap();
    let request: Arc<Vec<u8>> = Arc::new(
        [format!("POST /mutate-pods HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes(), body].concat(),
    );
    let connector = tls_connector(ca);

    let mut idle = open_idle(&connector, port, phase.idle).await;

    // Warm up, then measure memory.
    let (tx, rx) = mpsc::channel::<Instant>(100_000);
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(Duration, bool)>();
    for _ in 0..phase.connections {
        let connector = connector.clone();
        let request = request.clone();
        let rx = rx.clone();
        let done = done_tx.clone();
        tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap();
            let mut tls = connector
                .connect("127.0.0.1".try_into().unwrap(), tcp)
                .await
                .unwrap();
            let mut buffer = Vec::with_capacity(16 * 1024);
            loop {
                let Some(scheduled) = rx.lock().await.recv().await else {
                    return;
                };
                tls.write_all(&request).await.unwrap();
                let ok = read_response(&mut tls, &mut buffer).await;
                let _ = done.send((scheduled.elapsed(), ok));
            }
        });
    }
    drop(done_tx);
    let rss_before = rss_kib(server.id());
    let started = Instant::now();
    let rate = phase.rate;
    let producer = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        for _ in 0..total {
            let scheduled = tick.tick().await.into_std();
            if tx.send(scheduled).await.is_err() {
                return;
            }
        }
    });
    let mut latencies = Vec::with_capacity(usize::try_from(total).unwrap());
    let mut errors = 0u64;
    let mut rss_mid = 0;
    while let Some((latency, ok)) = done_rx.recv().await {
        latencies.push(latency);
        errors += u64::from(!ok);
        if latencies.len() as u64 == total / 10 {
            rss_mid = rss_kib(server.id());
        }
        if latencies.len() as u64 == total {
            break;
        }
    }
    producer.abort();
    let elapsed = started.elapsed();
    let still_open = still_open(&mut idle).await;
    let rss_after = rss_kib(server.id());
    server.kill().unwrap();
    let _ = server.wait();
    latencies.sort();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3;
    println!(
        "webhook, {}: {total} requests at {rate}/s over TLS, {} keep-alive connections",
        phase.name, phase.connections
    );
    if phase.idle > 0 {
        println!(
            "  {} idle TLS connections opened before, {still_open} still open at the end",
            phase.idle
        );
    }
    println!(
        "  achieved {:.0} requests/s, {errors} errors",
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        pct(0.50),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "  server RSS: {rss_before} KiB before, {rss_mid} KiB after 10%, {rss_after} KiB after all"
    );
    assert_eq!(errors, 0);
}
