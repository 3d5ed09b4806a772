//! The webhook holds under abuse and through restarts: 5,000 idle HTTP/2 connections from
//! one tenant's address do not stop the API server's reviews from being answered, and a
//! rolling restart of two replicas under 50 reviews/s loses none. The "API server" posts
//! from 127.0.0.2, the tenant connects from 127.0.0.1 (both loopback addresses).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use multiarch_admission::webhook::{
    decision::WebhookConfig,
    metrics::WebhookMetrics,
    server::{WebhookState, serve_with},
};
use multiarch_crd::PlacementMode;
use multiarch_runtime::https_server::bind;
use multiarch_runtime::server_limits::ServerLimits;
use multiarch_runtime::serving_cert::server_config;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// A serving certificate for 127.0.0.1 in `dir`; the CA's PEM.
fn certificate(dir: &std::path::Path) -> String {
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

/// The webhook's TLS configuration from a fresh certificate (its files in the returned
/// directory, kept alive by the caller), and the CA's PEM for clients.
fn serving_tls() -> (String, Arc<rustls::ServerConfig>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ca = certificate(dir.path());
    let tls = server_config(
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        Duration::from_secs(3600),
    )
    .unwrap();
    (ca, tls, dir)
}

fn state() -> WebhookState {
    WebhookState {
        config: Arc::new(RwLock::new(WebhookConfig::new(
            PlacementMode::Scheduler,
            "multiarch-scheduler",
            "multiarch",
        ))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup: None,
        reviews_need_client_certificate: false,
    }
}

fn review() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "2d8c1f0e-0000-4000-8000-000000000002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-", "namespace": "shop"},
                "spec": {"containers": [{"name": "app", "image": "quay.io/shop/web:1"}]}},
            "oldObject": null, "dryRun": false
        }
    }))
    .unwrap()
}

fn client_config(ca: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// A TCP connection to `addr` from the loopback address `from`.
async fn connect_from(from: [u8; 4], addr: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(addr).await
}

/// One review as the API server sends it, on a new connection from 127.0.0.2: the
/// status line, or the error that ended the exchange.
async fn post_review(addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> Result<String, String> {
    let exchange = async {
        let tcp = connect_from([127, 0, 0, 2], addr).await?;
        let mut stream = tokio_rustls::TlsConnector::from(tls)
            .connect("127.0.0.1".try_into().unwrap(), tcp)
            .await?;
        let body = review();
        let head = format!(
            "POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(30), exchange).await {
        Ok(Ok(text)) if text.starts_with("HTTP/1.1 200") && text.contains("\"allowed\":true") => {
            Ok(text.lines().next().unwrap_or_default().to_owned())
        }
        Ok(Ok(text)) => Err(format!("answered {:?}", text.lines().next())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 30 s".into()),
    }
}

struct Replica {
    addr: SocketAddr,
    shutdown: CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

async fn replica(tls: Arc<rustls::ServerConfig>, limits: ServerLimits) -> Replica {
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_with(listener, tls, state(), shutdown.clone(), limits));
    Replica {
        addr,
        shutdown,
        server,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_idle_http2_connections_do_not_stop_the_api_servers_reviews() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (ca, tls, _dir) = serving_tls();
    let webhook = replica(tls, ServerLimits::default()).await;
    let client = client_config(&ca);

    // The tenant: 5,000 HTTP/2 connections that open properly (TLS with ALPN h2, the
    // preface, SETTINGS) and then send nothing. Those beyond its address's share are
    // closed at accept; it keeps the ones it got.
    let mut h2 = (*client).clone();
    h2.alpn_protocols = vec![b"h2".to_vec()];
    let h2 = Arc::new(h2);
    let opening: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let held = Arc::new(Mutex::new(Vec::new()));
    let mut opened = 0;
    for batch in 0..50 {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..100 {
            let (h2, held) = (h2.clone(), held.clone());
            let addr = webhook.addr;
            tasks.spawn(async move {
                let tcp = connect_from([127, 0, 0, 1], addr).await.ok()?;
                let mut stream = tokio_rustls::TlsConnector::from(h2)
                    .connect("127.0.0.1".try_into().unwrap(), tcp)
                    .await
                    .ok()?;
                stream.write_all(opening).await.ok()?;
                held.lock().unwrap().push(stream);
                Some(())
            });
        }
        while let Some(done) = tasks.join_next().await {
            opened += usize::from(done.unwrap().is_some());
        }
        let _ = batch;
    }
    println!("the tenant opened {opened} of 5000 HTTP/2 connections");

    // Meanwhile the API server's reviews, one connection each.
    let mut latencies = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        let answer = post_review(webhook.addr, client.clone()).await;
        latencies.push(started.elapsed());
        assert!(answer.is_ok(), "a review was not answered: {answer:?}");
    }
    latencies.sort();
    println!(
        "reviews beside 5,000 idle HTTP/2 connections: p50 {:?}, p99 {:?}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() * 99 / 100]
    );
    drop(held);
    webhook.shutdown.cancel();
}

/// How long after a replica is told to stop the Service still sends it connections.
const SERVICE_LAG: Duration = Duration::from_millis(500);

/// Two replicas behind a Service under 50 reviews/s: each in turn is told to stop (as
/// the kubelet's SIGTERM does while the endpoint controller removes it from the
/// Service), a new one takes its place. Requests already routed to a stopping replica
/// (the Service's view lags) are served through its shutdown delay; in-flight ones
/// finish. No review fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_two_replicas_under_load_loses_no_review() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (ca, tls, _dir) = serving_tls();
    // The delay covers the Service's lag many times over, so a busy machine's late
    // timer cannot make it look short.
    let limits = ServerLimits {
        shutdown_delay: SERVICE_LAG * 10,
        ..ServerLimits::default()
    };
    let first = replica(tls.clone(), limits).await;
    let second = replica(tls.clone(), limits).await;
    let endpoints = Arc::new(Mutex::new(vec![first.addr, second.addr]));
    let client = client_config(&ca);

    // The API server: a review every 20 ms to the next endpoint the Service lists.
    let running = CancellationToken::new();
    let load = {
        let (endpoints, running, client) = (endpoints.clone(), running.clone(), client.clone());
        tokio::spawn(async move {
            let mut sent = tokio::task::JoinSet::new();
            let mut ticker = tokio::time::interval(Duration::from_millis(20));
            let mut next = 0usize;
            while !running.is_cancelled() {
                ticker.tick().await;
                let addr = {
                    let list = endpoints.lock().unwrap();
                    next = next.wrapping_add(1);
                    list[next % list.len()]
                };
                let client = client.clone();
                sent.spawn(async move { (addr, post_review(addr, client).await) });
            }
            let mut results = Vec::new();
            while let Some(result) = sent.join_next().await {
                results.push(result.unwrap());
            }
            results
        })
    };

    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut replaced = Vec::new();
    for old in [first, second] {
        // Stopped; the Service stops sending it new connections a little later (the
        // endpoint's removal reaches every node's proxy); its replacement joins when up.
        old.shutdown.cancel();
        tokio::time::sleep(SERVICE_LAG).await;
        endpoints.lock().unwrap().retain(|a| *a != old.addr);
        let new = replica(tls.clone(), limits).await;
        endpoints.lock().unwrap().push(new.addr);
        tokio::time::timeout(Duration::from_secs(60), old.server)
            .await
            .expect("the old replica finishes its drain")
            .unwrap();
        replaced.push(new);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.cancel();
    let results = load.await.unwrap();
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    println!(
        "rolling restart under 50 reviews/s: {} reviews, {} failed",
        results.len(),
        failed.len()
    );
    assert!(
        results.len() >= 100,
        "only {} reviews were sent",
        results.len()
    );
    assert!(failed.is_empty(), "reviews lost: {failed:?}");
    for replica in replaced {
        replica.shutdown.cancel();
    }
}
