//! The architecture constraint at admission, with image platforms read from a real
//! registry (Debian's docker-registry on 127.0.0.1) by the in-process inspector: a warm
//! image gets the constraint in the routing patch, a cold one is routed without it within
//! the deadline while its lookup goes on and warms the cache for the next replica.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::registry;

use std::{
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use base64::Engine;
use multiarch_admission::webhook::{
    admission_affinity::AdmissionAffinityResult,
    decision::WebhookConfig,
    image_lookup::{AdmissionLookup, Credentials},
    metrics::{ReviewResultLabel, WebhookMetrics},
    server::{WebhookState, answer},
};
use multiarch_crd::{PlacementMode, UnknownNodeLevel};
use multiarch_inspector::{
    ImageInfo, ImageInspector, InspectError, InspectRequest, Inspector, cache::CacheOptions,
    keyring::Keyring, metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use multiarch_policy::node_level::x86_64_level_alternatives;
use registry::{Options, Registry, platform, push_image, push_index};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The in-process inspector, whose first answer waits until the test releases it (a
/// registry slower than the admission deadline, without racing the clock).
struct HeldFirst {
    inner: Inspector,
    held: AtomicBool,
    release: Notify,
}

#[async_trait]
impl ImageInspector for HeldFirst {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        if self.held.swap(false, Ordering::SeqCst) {
            self.release.notified().await;
        }
        self.inner.inspect(request).await
    }
}

fn inspector(registry: &Registry) -> Inspector {
    let dir = registry.dir().join("settings");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("registries.yaml");
    std::fs::write(&file, registry.settings_yaml()).unwrap();
    Inspector::new(
        RegistrySettings::load(&file).unwrap(),
        RegistryOptions {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
            total_timeout: Duration::from_secs(20),
            ..RegistryOptions::default()
        },
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(Keyring::default()))),
        InspectorMetrics::default(),
    )
}

fn state(lookup: Option<AdmissionLookup>) -> WebhookState {
    WebhookState {
        config: Arc::new(RwLock::new(WebhookConfig::new(
            PlacementMode::Scheduler,
            "multiarch-scheduler",
            "multiarch",
        ))),
        metrics: WebhookMetrics::default(),
        registry: Arc::default(),
        lookup,
        reviews_need_client_certificate: false,
    }
}

/// A pod CREATE review shaped like the recorded ones (generateName: no name yet).
fn review(image: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0b7c5a3e-1b51-4a47-9c8e-0a1f3c7d2e91",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"generateName": "web-7d4b9c-", "namespace": "shop", "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": image}],
                    "schedulerName": "default-scheduler"}},
            "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    }))
    .unwrap()
}

/// The pod after the review's patch, and the review's answer.
async fn admit(state: &WebhookState, image: &str) -> Value {
    let body = review(image);
    let config = state.config.read().unwrap().clone();
    let (response, _) = answer(state, &config, body.clone().into()).await.unwrap();
    let request: Value = serde_json::from_slice(&body).unwrap();
    let mut pod = request["request"]["object"].clone();
    let patch = response["response"]["patch"].as_str().unwrap();
    let ops: json_patch::Patch = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap(),
    )
    .unwrap();
    json_patch::patch(&mut pod, &ops).unwrap();
    assert_eq!(pod["spec"]["schedulerName"], "multiarch-scheduler");
    pod
}

fn required_archs(pod: &Value) -> Value {
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchExpressions"][0]
        .clone()
}

fn counted(state: &WebhookState, result: AdmissionAffinityResult) -> u64 {
    state
        .metrics
        .admission_affinity
        .get_or_create(&ReviewResultLabel {
            result: result.as_str(),
        })
        .get()
}

async fn push_multi(registry: &Registry) -> String {
    let mut entries = Vec::new();
    for arch in ["amd64", "arm64"] {
        let pushed = push_image(registry, "web", "linux", arch, None, false, None).await;
        entries.push((pushed, platform("linux", arch, None), None));
    }
    push_index(registry, "web", "v1", false, &entries).await;
    format!("{}/web:v1", registry.addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_pods_are_routed_in_time_and_warm_the_cache_for_the_next_replica() {
    let registry = Registry::start(Options::default());
    let image = push_multi(&registry).await;
    let inspector = Arc::new(HeldFirst {
        inner: inspector(&registry),
        held: AtomicBool::new(true),
        release: Notify::new(),
    });
    let lookup = AdmissionLookup::new(
        inspector.clone(),
        Duration::from_millis(200),
        1,
        Credentials::PodSecrets,
    );
    let state = state(Some(lookup));

    // Cold: the registry has not answered by the deadline; routed without the constraint.
    let started = Instant::now();
    let cold = admit(&state, &image).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(cold["spec"].get("affinity").is_none(), "{cold}");
    assert_eq!(counted(&state, AdmissionAffinityResult::TimedOut), 1);
    // Its lookup holds the only slot meanwhile: another pod is routed at once.
    admit(&state, &image).await;
    assert_eq!(counted(&state, AdmissionAffinityResult::Busy), 1);

    // The lookup goes on after admission: released, it fills the cache.
    inspector.release.notify_one();
    let deadline = Instant::now() + Duration::from_secs(30);
    while inspector.inner.cache().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the background lookup never finished"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let requests = inspector.inner.registry_requests();

    // The next replica: the constraint in the same patch, from the cache.
    let warm = admit(&state, &image).await;
    assert_eq!(
        required_archs(&warm),
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]})
    );
    assert_eq!(counted(&state, AdmissionAffinityResult::Set), 1);
    assert_eq!(
        inspector.inner.registry_requests(),
        requests,
        "served from the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_a_disabled_field_route_without_the_constraint() {
    let registry = Registry::start(Options::default());
    let image = push_multi(&registry).await;
    let inner = Arc::new(inspector(&registry));
    let lookup = AdmissionLookup::new(
        inner.clone(),
        Duration::from_secs(20),
        8,
        Credentials::PodSecrets,
    );
    let state = state(Some(lookup));

    // An image the registry does not have: routed, no constraint, counted.
    let missing = admit(&state, &format!("{}/nothing:v1", registry.addr)).await;
    assert!(missing["spec"].get("affinity").is_none(), "{missing}");
    assert_eq!(counted(&state, AdmissionAffinityResult::Failed), 1);

    // `admissionAffinity: Disabled`: no lookup at all.
    state.config.write().unwrap().admission_affinity = false;
    let requests = inner.registry_requests();
    let disabled = admit(&state, &image).await;
    assert!(disabled["spec"].get("affinity").is_none(), "{disabled}");
    assert_eq!(inner.registry_requests(), requests);

    // Enabled again: the constraint.
    state.config.write().unwrap().admission_affinity = true;
    let pod = admit(&state, &image).await;
    assert_eq!(required_archs(&pod)["values"], json!(["amd64", "arm64"]));
}

/// An index whose amd64 build is for x86-64-v3 (as RHEL 10's are), read from the real
/// registry: the constraint keeps amd64 nodes of a lower level away (unlabelled ones
/// stay), so an autoscaler sees the level too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x86_64_v3_build_is_constrained_to_v3_nodes_at_admission() {
    let registry = Registry::start(Options::default());
    let v3 = push_image(
        &registry,
        "ubi10",
        "linux",
        "amd64",
        Some("v3"),
        false,
        None,
    )
    .await;
    let arm = push_image(&registry, "ubi10", "linux", "arm64", None, false, None).await;
    push_index(
        &registry,
        "ubi10",
        "10.0",
        false,
        &[
            (v3, platform("linux", "amd64", Some("v3")), None),
            (arm, platform("linux", "arm64", None), None),
        ],
    )
    .await;
    let lookup = AdmissionLookup::new(
        Arc::new(inspector(&registry)),
        Duration::from_secs(20),
        8,
        Credentials::PodSecrets,
    );
    let state = state(Some(lookup));
    let pod = admit(&state, &format!("{}/ubi10:10.0", registry.addr)).await;
    let arch =
        |values: &[&str]| json!({"key": "kubernetes.io/arch", "operator": "In", "values": values});
    let linux = json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]});
    // One amd64 term per way a node shows its level: multiarch's label, neither it nor
    // node-feature-discovery's flags, or NFD's flags (x86_64_level_alternatives).
    let amd64_terms = x86_64_level_alternatives(3, UnknownNodeLevel::AnyLevel)
        .into_iter()
        .map(|alternative| {
            let mut expressions = vec![arch(&["amd64"])];
            expressions.extend(alternative.iter().map(|e| json!(e)));
            expressions.push(linux.clone());
            json!({"matchExpressions": expressions})
        });
    let terms = &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(
        *terms,
        Value::Array(
            std::iter::once(json!({"matchExpressions": [arch(&["arm64"]), linux.clone()]}))
                .chain(amd64_terms)
                .collect()
        )
    );
    assert_eq!(
        terms[1],
        json!({"matchExpressions": [
            arch(&["amd64"]),
            {"key": "multiarch.openshift.io/arch-variant", "operator": "Exists"},
            {"key": "multiarch.openshift.io/arch-variant", "operator": "NotIn", "values": ["v1", "v2"]},
            linux,
        ]})
    );
    assert_eq!(counted(&state, AdmissionAffinityResult::Set), 1);
}
