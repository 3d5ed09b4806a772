//! The admission webhook on the AdmissionReviews recorded from a real API server (and
//! variations): every exemption, both modes, the JSONPatch applied to the pod, and the
//! HTTPS server with certificate reload.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    path::PathBuf,
    sync::{Arc, RwLock},
    time::Duration,
};

use base64::Engine;
use multiarch_admission::webhook::{
    decision::{WebhookConfig, decide},
    metrics::WebhookMetrics,
    review::review,
    server::{WebhookState, serve},
};
use multiarch_crd::{PlacementMode, PodPlacementConfig};
use multiarch_policy::exemption::Exemption;
use multiarch_runtime::https_server::bind;
use multiarch_runtime::serving_cert::server_config;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/admission")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn config(mode: PlacementMode) -> WebhookConfig {
    WebhookConfig::new(mode, "multiarch-scheduler", "multiarch")
}

/// Runs the review and applies its patch to the request's pod.
fn admit(request: &Value, config: &WebhookConfig) -> (Value, Value) {
    let (response, _) = review(&serde_json::to_vec(request).unwrap(), config).unwrap();
    assert_eq!(response["response"]["uid"], request["request"]["uid"]);
    assert_eq!(response["response"]["allowed"], true);
    let mut pod = request["request"]["object"].clone();
    if let Some(patch) = response["response"]["patch"].as_str() {
        assert_eq!(response["response"]["patchType"], "JSONPatch");
        let ops: json_patch::Patch = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(patch)
                .unwrap(),
        )
        .unwrap();
        json_patch::patch(&mut pod, &ops).unwrap();
    }
    (response, pod)
}

#[test]
fn responses_have_the_recorded_shape() {
    let (response, _) = review(
        &serde_json::to_vec(&fixture("admissionreview-request-0.json")).unwrap(),
        &config(PlacementMode::Scheduler),
    )
    .unwrap();
    let mut recorded = fixture("admissionreview-response-0.json");
    let mut ours = response;
    // The patch is base64 of JSON; compare the JSON (the recording has other whitespace).
    let decode = |v: &mut Value| -> Value {
        let text = v["response"]["patch"].take();
        serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(text.as_str().unwrap())
                .unwrap(),
        )
        .unwrap()
    };
    assert_eq!(decode(&mut ours), decode(&mut recorded));
    assert_eq!(
        ours, recorded,
        "the rest is the JSON a real API server accepted"
    );
}

#[test]
fn routes_the_recorded_pods_exactly_as_the_recorded_responses() {
    for i in 0..2 {
        let request = fixture(&format!("admissionreview-request-{i}.json"));
        let recorded = fixture(&format!("admissionreview-response-{i}.json"));
        let (response, pod) = admit(&request, &config(PlacementMode::Scheduler));
        let ours: Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(response["response"]["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        let theirs: Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(recorded["response"]["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(ours, theirs, "request {i}");
        assert_eq!(pod["spec"]["schedulerName"], "multiarch-scheduler");
        // Minimal: nothing else changed.
        let mut expected = request["request"]["object"].clone();
        expected["spec"]["schedulerName"] = json!("multiarch-scheduler");
        assert_eq!(pod, expected);
    }
}

/// MTO's webhook saw pods in system namespaces and labelled them `not-set` in gate mode;
/// its users' tooling reads those labels. Never gated, never in scheduler mode.
#[test]
fn gate_mode_labels_system_namespace_pods_without_gating_them() {
    for namespace in ["kube-system", "multiarch"] {
        let mut request = fixture("admissionreview-request-1.json");
        request["request"]["namespace"] = json!(namespace);
        let (_, pod) = admit(&request, &config(PlacementMode::SchedulingGate));
        assert_eq!(
            pod["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"], "not-set",
            "{namespace}"
        );
        assert_eq!(
            pod["metadata"]["labels"]["multiarch.openshift.io/node-affinity"],
            "not-set"
        );
        assert!(
            pod["spec"]["schedulingGates"].is_null(),
            "{namespace}: {pod}"
        );
        let (response, _) = admit(&request, &config(PlacementMode::Scheduler));
        assert!(response["response"]["patch"].is_null(), "{namespace}");
    }
    let mut opted_out = fixture("admissionreview-request-1.json");
    opted_out["request"]["object"]["metadata"]["labels"] =
        json!({"multiarch.openshift.io/scheduler": "default"});
    let (response, _) = admit(&opted_out, &config(PlacementMode::SchedulingGate));
    assert!(response["response"]["patch"].is_null());
}

#[test]
fn exemptions_leave_the_pod_unchanged() {
    let base = fixture("admissionreview-request-1.json");
    type Edit = fn(&mut Value);
    let cases: Vec<(&str, Edit, Exemption)> = vec![
        (
            "kube-system",
            |r| r["request"]["namespace"] = json!("kube-system"),
            Exemption::SystemNamespace,
        ),
        (
            "own namespace",
            |r| r["request"]["namespace"] = json!("multiarch"),
            Exemption::OwnNamespace,
        ),
        (
            "nodeName",
            |r| r["request"]["object"]["spec"]["nodeName"] = json!("n1"),
            Exemption::NodeName,
        ),
        (
            "daemonset",
            |r| r["request"]["object"]["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]),
            Exemption::DaemonSet,
        ),
        (
            "control plane",
            |r| {
                r["request"]["object"]["spec"]["nodeSelector"] =
                    json!({"node-role.kubernetes.io/control-plane": ""})
            },
            Exemption::ControlPlane,
        ),
        (
            "opt-out",
            |r| {
                r["request"]["object"]["metadata"]["labels"] =
                    json!({"multiarch.openshift.io/scheduler": "default"})
            },
            Exemption::OptOut,
        ),
        (
            "other scheduler",
            |r| r["request"]["object"]["spec"]["schedulerName"] = json!("volcano"),
            Exemption::OtherScheduler,
        ),
    ];
    for (name, edit, want) in cases {
        let mut request = base.clone();
        edit(&mut request);
        let (response, pod) = admit(&request, &config(PlacementMode::Scheduler));
        assert!(
            response["response"]["patch"].is_null(),
            "{name}: {response}"
        );
        assert_eq!(pod, request["request"]["object"], "{name}");
        let object: k8s_openapi::api::core::v1::Pod =
            serde_json::from_value(request["request"]["object"].clone()).unwrap();
        let ns = request["request"]["namespace"].as_str().unwrap();
        assert_eq!(
            decide(&object, ns, &config(PlacementMode::Scheduler)).exemption,
            Some(want),
            "{name}"
        );
    }
    // A ReplicaSet owner is no exemption.
    let mut request = base.clone();
    request["request"]["object"]["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]);
    let (_, pod) = admit(&request, &config(PlacementMode::Scheduler));
    assert_eq!(pod["spec"]["schedulerName"], "multiarch-scheduler");
}

/// Routing safety: a pod with resource claims (which the scheduler does not allocate) is
/// never routed to it; in scheduler mode it takes the gate path, so the default
/// scheduler places it with an architecture constraint.
#[test]
fn pods_the_scheduler_cannot_place_stay_with_the_default_scheduler_and_are_gated() {
    let mut request = fixture("admissionreview-request-1.json");
    request["request"]["object"]["spec"]["resourceClaims"] =
        json!([{"name": "gpu", "resourceClaimName": "gpu-claim"}]);
    let (response, pod) = admit(&request, &config(PlacementMode::Scheduler));
    assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(
        pod["spec"]["schedulingGates"],
        json!([{"name": "multiarch.openshift.io/scheduling-gate"}])
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"],
        "gated"
    );
    let (_, decision) = review(
        &serde_json::to_vec(&request).unwrap(),
        &config(PlacementMode::Scheduler),
    )
    .unwrap();
    let decision = decision.unwrap();
    assert!(decision.gated);
    assert_eq!(
        decision.unsupported,
        [multiarch_policy::routing::Unsupported::DynamicResourceClaims]
    );
    assert!(response["response"]["patch"].is_string());
    // The same pod without claims is routed.
    let plain = fixture("admissionreview-request-1.json");
    let (_, pod) = admit(&plain, &config(PlacementMode::Scheduler));
    assert_eq!(pod["spec"]["schedulerName"], "multiarch-scheduler");
    assert!(pod["spec"]["schedulingGates"].is_null());
}

/// A container asking for a DeviceClass's extended resource (DRAExtendedResource, on by
/// default in 1.36) is placed by kube-scheduler's DynamicResources plugin: the gate path.
#[test]
fn pods_asking_for_a_device_class_s_extended_resource_stay_with_the_default_scheduler() {
    let mut request = fixture("admissionreview-request-1.json");
    request["request"]["object"]["spec"]["containers"][0]["resources"] =
        json!({"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": "1"}});
    let (_, pod) = admit(&request, &config(PlacementMode::Scheduler));
    assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
    assert_eq!(
        pod["spec"]["schedulingGates"],
        json!([{"name": "multiarch.openshift.io/scheduling-gate"}])
    );
    let (_, decision) = review(
        &serde_json::to_vec(&request).unwrap(),
        &config(PlacementMode::Scheduler),
    )
    .unwrap();
    assert_eq!(
        decision.unwrap().unsupported,
        [multiarch_policy::routing::Unsupported::DeviceClassExtendedResources]
    );
}

#[test]
fn gate_mode_adds_the_gate_and_mtos_labels() {
    let request = fixture("admissionreview-request-1.json");
    let (_, pod) = admit(&request, &config(PlacementMode::SchedulingGate));
    assert_eq!(
        pod["spec"]["schedulingGates"],
        json!([{"name": "multiarch.openshift.io/scheduling-gate"}])
    );
    assert_eq!(
        pod["spec"]["schedulerName"], "default-scheduler",
        "gate mode keeps the default scheduler"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"],
        "gated"
    );
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/node-affinity"],
        "not-set"
    );
    assert!(pod["metadata"]["labels"]["multiarch.openshift.io/preferred-node-affinity"].is_null());

    let mut with_prefs = config(PlacementMode::SchedulingGate);
    with_prefs.preferences_enabled = true;
    let (_, pod) = admit(&request, &with_prefs);
    assert_eq!(
        pod["metadata"]["labels"]["multiarch.openshift.io/preferred-node-affinity"],
        "not-set"
    );

    // The recorded gated pod already has the gate: not added twice.
    let gated = fixture("admissionreview-request-2.json");
    let (_, pod) = admit(&gated, &config(PlacementMode::SchedulingGate));
    assert_eq!(pod["spec"]["schedulingGates"].as_array().unwrap().len(), 1);

    // Architecture already required, no preferences to add: labelled, not gated.
    let pinned = fixture("admissionreview-request-0.json");
    let (_, pod) = admit(&pinned, &config(PlacementMode::SchedulingGate));
    let has_arch = pinned["request"]["object"]["spec"]["affinity"]
        .to_string()
        .contains("kubernetes.io/arch");
    if has_arch {
        assert!(pod["spec"]["schedulingGates"].is_null(), "{pod}");
        assert_eq!(
            pod["metadata"]["labels"]["multiarch.openshift.io/scheduling-gate"],
            "not-set"
        );
    }
    // DaemonSet pods are labelled but never gated (MTO's rule).
    let mut ds = request.clone();
    ds["request"]["object"]["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u", "controller": true}]);
    let (_, pod) = admit(&ds, &config(PlacementMode::SchedulingGate));
    assert!(pod["spec"]["schedulingGates"].is_null());
}

#[test]
fn gate_mode_follows_the_pod_placement_configs_that_select_the_pod() {
    let ppc = |name: &str, namespace: &str, app: &str, enabled: bool| -> PodPlacementConfig {
        serde_json::from_value(json!({
            "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"labelSelector": {"matchLabels": {"app": app}},
                     "plugins": {"nodeAffinityScoring": {"enabled": enabled, "platforms": [{"architecture": "arm64", "weight": 10}]}}}
        }))
        .unwrap()
    };
    let mut request = fixture("admissionreview-request-1.json");
    let namespace = request["request"]["namespace"].as_str().unwrap().to_owned();
    request["request"]["object"]["metadata"]["labels"] = json!({"app": "web"});
    let label = |configs: Vec<PodPlacementConfig>, request: &Value| {
        let mut config = config(PlacementMode::SchedulingGate);
        config.pod_configs = multiarch_policy::pod_configs::NamespacedConfigs::owned(configs);
        let (_, pod) = admit(request, &config);
        (
            pod["metadata"]["labels"]["multiarch.openshift.io/preferred-node-affinity"].clone(),
            pod["spec"]["schedulingGates"].clone(),
        )
    };
    let selecting = ppc("web-on-arm", &namespace, "web", true);
    assert_eq!(label(vec![selecting.clone()], &request).0, "not-set");
    for (why, other) in [
        ("selects other pods", ppc("db", &namespace, "db", true)),
        (
            "other namespace",
            ppc("web-elsewhere", "elsewhere", "web", true),
        ),
        ("plugin disabled", ppc("web-off", &namespace, "web", false)),
    ] {
        assert!(label(vec![other], &request).0.is_null(), "{why}");
    }
    // Architecture pinned by the user: gated anyway when a selecting config will add
    // preferred affinity, left alone otherwise (MTO's rule).
    request["request"]["object"]["spec"]["nodeSelector"] = json!({"kubernetes.io/arch": "amd64"});
    assert_eq!(
        label(vec![selecting], &request).1,
        json!([{"name": "multiarch.openshift.io/scheduling-gate"}])
    );
    assert!(label(vec![], &request).1.is_null());
}

#[test]
fn non_create_requests_and_garbage() {
    let mut update = fixture("admissionreview-request-1.json");
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = update["request"]["object"].clone();
    let (response, pod) = admit(&update, &config(PlacementMode::Scheduler));
    assert!(response["response"]["patch"].is_null());
    assert_eq!(pod, update["request"]["object"]);
    let err = review(b"{not json", &config(PlacementMode::Scheduler)).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("the request is not an AdmissionReview v1"),
        "{err}"
    );
    assert!(
        review(
            br#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}"#,
            &config(PlacementMode::Scheduler)
        )
        .is_err()
    );
}

// ---- HTTPS ----

fn write_cert(dir: &std::path::Path, cn: &str) -> String {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("{cn} CA"));
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    let cert = params.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca.pem()
}

/// POSTs over TLS trusting `ca`; returns (status line, body, server certificate DER).
async fn post(
    addr: std::net::SocketAddr,
    ca: &str,
    path: &str,
    body: &[u8],
) -> (String, Vec<u8>, Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = connector
        .connect("127.0.0.1".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    let head = format!(
        "{} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        // An empty body is a probe: GET.
        if body.is_empty() { "GET" } else { "POST" },
        body.len()
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.write_all(body).await.unwrap();
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.as_bytes().to_vec())
        .unwrap_or_default();
    (status, body, peer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_reviews_rejects_garbage_and_reloads_its_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("multiarch-webhook-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first_ca = write_cert(&dir, "first");
    let tls = server_config(
        dir.join("tls.crt"),
        dir.join("tls.key"),
        Duration::from_millis(100),
    )
    .unwrap();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = WebhookMetrics::default();
    metrics.register(&mut registry);
    let mut unknown = config(PlacementMode::Scheduler);
    unknown.known = false;
    let config_handle = Arc::new(RwLock::new(unknown));
    let state = WebhookState {
        config: config_handle.clone(),
        metrics,
        registry: Arc::new(registry),
        lookup: None,
        reviews_need_client_certificate: false,
    };
    let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(serve(listener, tls, state, shutdown.clone()));

    let request = serde_json::to_vec(&fixture("admissionreview-request-0.json")).unwrap();
    // Not ready, and no routing, until the placement configuration is known.
    let (status, _, _) = post(addr, &first_ca, "/readyz", b"").await;
    assert!(status.contains("503"), "{status}");
    let (status, body, _) = post(addr, &first_ca, "/mutate-pods", &request).await;
    assert!(status.contains("200"), "{status}");
    let review: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["response"]["allowed"], true);
    assert!(review["response"].get("patch").is_none(), "{review}");
    config_handle.write().unwrap().known = true;
    let (status, _, _) = post(addr, &first_ca, "/readyz", b"").await;
    assert!(status.contains("200"), "{status}");
    let (status, body, first_cert) = post(addr, &first_ca, "/mutate-pods", &request).await;
    assert!(status.contains("200"), "{status}");
    let review: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(review["response"]["allowed"], true);
    assert!(
        review["response"].get("patch").is_some(),
        "routed once known"
    );

    // Undecodable: an HTTP error, so failurePolicy Ignore admits the pod unchanged.
    let (status, _, _) = post(addr, &first_ca, "/mutate-pods", b"garbage").await;
    assert!(status.contains("400"), "{status}");

    // New files: new handshakes get the new certificate, no restart.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second_ca = write_cert(&dir, "second");
    let mut reloaded = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Until the reload, the handshake with the new CA fails (the task panics).
        let ca = second_ca.clone();
        if let Ok((_, _, cert)) =
            tokio::spawn(async move { post(addr, &ca, "/healthz", b"").await }).await
            && cert != first_cert
        {
            reloaded = true;
            break;
        }
    }
    assert!(reloaded, "the new certificate was never served");
    // Shutdown stops the server.
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Idle clients cannot hold the webhook: a connection that never completes its TLS
/// handshake is closed after the handshake timeout, and beyond the connection limit new
/// connections are closed at once while the others are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_bounded_in_time_and_number() {
    use multiarch_admission::webhook::server::serve_with;
    use multiarch_runtime::server_limits::ServerLimits;
    use tokio::io::AsyncReadExt;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("multiarch-webhook-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = write_cert(&dir, "idle");
    let tls = server_config(
        dir.join("tls.crt"),
        dir.join("tls.key"),
        Duration::from_secs(10),
    )
    .unwrap();
    let state = WebhookState {
        config: Arc::new(RwLock::new(config(PlacementMode::Scheduler))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup: None,
        reviews_need_client_certificate: false,
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let start = |limits: ServerLimits| {
        let tls = tls.clone();
        let state = state.clone();
        let shutdown = shutdown.clone();
        async move {
            let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(serve_with(listener, tls, state, shutdown, limits));
            addr
        }
    };
    // Closed by the server: the read ends (0 bytes) instead of hanging.
    async fn closed(stream: &mut tokio::net::TcpStream) -> bool {
        let mut buffer = [0u8; 64];
        matches!(
            tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    let quick = start(ServerLimits {
        handshake_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    })
    .await;
    let mut silent = tokio::net::TcpStream::connect(quick).await.unwrap();
    assert!(closed(&mut silent).await, "a silent client was not dropped");

    // Two silent clients hold both slots of a server whose handshake timeout is far
    // longer than the wait: a third is closed at once, by the limit.
    let capped = start(ServerLimits {
        max_connections: 2,
        handshake_timeout: Duration::from_secs(120),
        ..ServerLimits::default()
    })
    .await;
    let first = tokio::net::TcpStream::connect(capped).await.unwrap();
    let second = tokio::net::TcpStream::connect(capped).await.unwrap();
    let mut third = tokio::net::TcpStream::connect(capped).await.unwrap();
    assert!(closed(&mut third).await, "the third connection was kept");
    // The silent clients leave: their slots come back and reviews are answered.
    drop((first, second));
    let request = serde_json::to_vec(&fixture("admissionreview-request-0.json")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (ca, request) = (ca.clone(), request.clone());
        let answer =
            tokio::spawn(async move { post(capped, &ca, "/mutate-pods", &request).await }).await;
        if let Ok((status, _, _)) = answer
            && status.contains("200")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "slots never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A review is read up to 8 MiB (a pod with 2.5 MiB of annotations is answered; axum's
/// default 2 MB would have refused it) and refused with 413 beyond it.
#[tokio::test]
async fn reviews_are_read_up_to_their_bound() {
    use multiarch_admission::webhook::server::router;
    use multiarch_runtime::request_body::MAX_REVIEW_BYTES;
    use tower::ServiceExt;
    let state = WebhookState {
        config: Arc::new(RwLock::new(config(PlacementMode::Scheduler))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup: None,
        reviews_need_client_certificate: false,
    };
    let post = |body: Vec<u8>| {
        axum::http::Request::post("/mutate-pods")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body))
            .unwrap()
    };
    let mut large = fixture("admissionreview-request-1.json");
    large["request"]["object"]["metadata"]["annotations"] =
        json!({"example.com/blob": "x".repeat(2_500_000)});
    let answer = router(state.clone())
        .oneshot(post(serde_json::to_vec(&large).unwrap()))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
        .await
        .unwrap();
    let response: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(response["response"]["uid"], large["request"]["uid"]);

    let answer = router(state)
        .oneshot(post(vec![b' '; MAX_REVIEW_BYTES + 1]))
        .await
        .unwrap();
    assert_eq!(answer.status(), 413);
}

/// The operator pins the mode in the webhook configuration's path, so a mode switch is
/// one write the API server sees at once; `/mutate-pods` follows the configuration.
#[tokio::test]
async fn the_path_pins_the_mode() {
    use multiarch_admission::webhook::server::router;
    use tower::ServiceExt;
    let state = WebhookState {
        config: Arc::new(RwLock::new(config(PlacementMode::Scheduler))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup: None,
        reviews_need_client_certificate: false,
    };
    let review = serde_json::to_vec(&fixture("admissionreview-request-1.json")).unwrap();
    let mut patches = Vec::new();
    for path in [
        "/mutate-pods",
        "/mutate-pods/scheduler",
        "/mutate-pods/gate",
    ] {
        let answer = router(state.clone())
            .oneshot(
                axum::http::Request::post(path)
                    .header("content-type", "application/json")
                    .body(axum::body::Body::from(review.clone()))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20)
            .await
            .unwrap();
        let response: Value = serde_json::from_slice(&body).unwrap();
        let patch: Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(response["response"]["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        patches.push(patch.to_string());
    }
    assert!(patches[0].contains("/spec/schedulerName"), "{}", patches[0]);
    assert_eq!(patches[0], patches[1]);
    assert!(
        patches[2].contains("/spec/schedulingGates"),
        "{}",
        patches[2]
    );
    assert!(!patches[2].contains("/spec/schedulerName"));
}
