//! Tenants who post large AdmissionReviews at the webhook's port themselves cost it a
//! bounded amount of memory, and the API server's reviews go on being answered with
//! their routing patch meanwhile (none admitted unrouted, which `failurePolicy: Ignore`
//! would do to a review the webhook failed). Three tenants' addresses (127.0.0.1, .2,
//! .4: one the API server's own) post 48 reviews at once: of almost 4 MiB, over the limit, and of a million empty
//! volumes (3 MB of JSON that would be 3 GB of structs); the "API server" (127.0.0.2)
//! posts ordinary pod reviews all the while. This file is its own
//! test binary, so the process's peak RSS is this test's alone.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
    time::Duration,
};

use multiarch_admission::webhook::{
    decision::WebhookConfig,
    metrics::WebhookMetrics,
    server::{WebhookState, serve_with},
};
use multiarch_crd::PlacementMode;
use multiarch_runtime::https_server::bind;
use multiarch_runtime::request_body::MAX_REVIEW_BYTES;
use multiarch_runtime::server_limits::ServerLimits;
use multiarch_runtime::serving_cert::server_config;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The bound for the whole test process (the tenants' and the API server's clients
/// included). Measured: 168–204 MiB; before the reviews were bounded in flight and
/// priced by their shape (8 MiB each, parsed into a tree of the whole review, its object
/// copied, then typed): 6,414 MiB.
const PEAK_RSS_BOUND: u64 = 256 * 1024 * 1024;

fn serving_tls() -> (String, Arc<rustls::ServerConfig>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
    let tls = server_config(
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        Duration::from_secs(3600),
    )
    .unwrap();
    (ca.pem(), tls, dir)
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

/// A pod CREATE review of `volumes` empty volumes: 3 MB of JSON, 700 MiB as structs.
fn volume_bomb() -> Vec<u8> {
    let volumes = vec!["{}"; 1_000_000].join(",");
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"bomb","kind":{{"group":"","version":"v1","kind":"Pod"}},"resource":{{"group":"","version":"v1","resource":"pods"}},"namespace":"shop","operation":"CREATE","userInfo":{{"username":"tenant"}},"object":{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"x","namespace":"shop"}},"spec":{{"containers":[{{"name":"app","image":"quay.io/shop/web:1"}}],"volumes":[{volumes}]}}}}}}}}"#
    )
    .into_bytes()
}

/// A pod CREATE review whose pod carries an annotation of `padding` bytes.
fn review(uid: &str, padding: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-", "namespace": "shop",
                    "annotations": {"padding": "x".repeat(padding)}},
                "spec": {"containers": [{"name": "app", "image": "quay.io/shop/web:1"}]}},
            "oldObject": null, "dryRun": false
        }
    }))
    .unwrap()
}

/// Posts `body` from the loopback address `from`; the status code and the response body.
async fn post(
    from: [u8; 4],
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    body: Arc<Vec<u8>>,
    send_body: bool,
) -> Result<(u16, String), String> {
    let exchange = async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((from, 0)))?;
        let tcp = socket.connect(addr).await?;
        let mut stream = tokio_rustls::TlsConnector::from(tls)
            .connect("127.0.0.1".try_into().unwrap(), tcp)
            .await?;
        let head = format!(
            "POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        // A refusal may come (and the connection close) before the body is all sent.
        if send_body {
            let _ = stream.write_all(&body).await;
        }
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(60), exchange).await {
        Ok(Ok(text)) => {
            let status = text
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("no status line: {:?}", text.lines().next()))?;
            Ok((status, text))
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 60 s".into()),
    }
}

fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_reviews_from_tenants_cost_a_bounded_memory_and_the_api_servers_are_routed() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (ca, tls, _dir) = serving_tls();
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let state = WebhookState {
        config: Arc::new(RwLock::new(WebhookConfig::new(
            PlacementMode::Scheduler,
            "multiarch-scheduler",
            "multiarch",
        ))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup: None,
        reviews_need_client_certificate: false,
    };
    let server = tokio::spawn(serve_with(
        listener,
        tls,
        state,
        shutdown.clone(),
        ServerLimits::default(),
    ));
    let client = client_config(&ca);
    let large = Arc::new(review("large", MAX_REVIEW_BYTES - 4096));
    assert!(large.len() <= MAX_REVIEW_BYTES && large.len() > MAX_REVIEW_BYTES - 8192);
    let over = Arc::new(review("over", MAX_REVIEW_BYTES));
    let bomb = Arc::new(volume_bomb());
    assert!(bomb.len() < MAX_REVIEW_BYTES);
    let before = peak_rss();

    let mut tenants = tokio::task::JoinSet::new();
    // One tenant posts from the API server's own address (as pods behind one node's
    // address may): its share is spent, the API server's small reviews use the reserve.
    for from in [[127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 4]] {
        for i in 0..16 {
            let (kind, body) = match i {
                0 => ("over", over.clone()),
                1..=4 => ("bomb", bomb.clone()),
                _ => ("large", large.clone()),
            };
            let client = client.clone();
            // A body over the limit is announced, not sent: the refusal comes from its
            // length, and a reset while it would be written could lose the answer.
            let send_body = kind != "over";
            tenants.spawn(async move { (kind, post(from, addr, client, body, send_body).await) });
        }
    }
    // The API server's reviews while the tenants post: each is answered with its route.
    let mut routed = 0;
    for i in 0..100 {
        let body = Arc::new(review(&format!("pod-{i}"), 100));
        let (status, text) = post([127, 0, 0, 2], addr, client.clone(), body, true)
            .await
            .unwrap();
        assert_eq!(status, 200, "an API server review was refused: {text}");
        assert!(
            text.contains("\"allowed\":true") && text.contains("\"patch\""),
            "admitted unrouted: {text}"
        );
        routed += 1;
    }
    let mut statuses = std::collections::BTreeMap::new();
    while let Some(answer) = tenants.join_next().await {
        let (kind, answer) = answer.unwrap();
        let status = answer.map_or(0, |(status, _)| status);
        *statuses.entry((kind, status)).or_insert(0) += 1;
    }
    let peak = peak_rss();
    println!(
        "48 large or complex reviews from three tenants at once: peak RSS {} MiB (before: {} MiB); the tenants were answered {statuses:?}; {routed} API server reviews routed meanwhile",
        peak / 1024 / 1024,
        before / 1024 / 1024,
    );
    // A body over the limit is refused by its length; a bomb by its shape once read, or
    // for want of room while it is read (as a large one may be): never parsed.
    assert_eq!(
        statuses.get(&("over", 413)),
        Some(&3),
        "each body over the limit refused: {statuses:?}"
    );
    let bombs: usize = statuses
        .iter()
        .filter(|((kind, status), _)| *kind == "bomb" && [413, 429, 503].contains(status))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(bombs, 12, "each bomb refused unparsed: {statuses:?}");
    assert!(
        peak < PEAK_RSS_BOUND,
        "peak RSS {} MiB over the {} MiB bound",
        peak / 1024 / 1024,
        PEAK_RSS_BOUND / 1024 / 1024
    );
    shutdown.cancel();
    server.await.unwrap();
}
