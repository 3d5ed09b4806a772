//! The HTTPS server: `/mutate-pods` (AdmissionReview), `/healthz`, `/readyz`, `/metrics`.
//! It never blocks a request on anything but its own decision.

use std::{
    sync::{Arc, RwLock},
    time::Instant,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use multiarch_crd::PlacementMode;
use multiarch_runtime::{
    json_shape::Prices,
    ops_server::health_routes,
    peer::Peer,
    request_body::{MAX_REVIEW_BYTES, RequestBodies, within_budget},
    server_limits::ServerLimits,
};
use prometheus_client::registry::Registry;
use rustls::ServerConfig;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{
    admission_affinity::{AdmissionAffinityResult, constraint_patch},
    decision::{Decision, WebhookConfig},
    image_lookup::{AdmissionLookup, Lookup},
    metrics::{ReviewResultLabel, WebhookMetrics},
    review::{Request, ReviewError, parse, respond},
};

#[derive(Clone)]
pub struct WebhookState {
    pub config: Arc<RwLock<WebhookConfig>>,
    pub metrics: WebhookMetrics,
    pub registry: Arc<Registry>,
    /// Scheduler mode: where routed pods' image platforms come from (none: routed
    /// without the constraint).
    pub lookup: Option<AdmissionLookup>,
    /// Reviews are answered only for callers that presented a verified client
    /// certificate (`--client-ca`); the probes and metrics never need one.
    pub reviews_need_client_certificate: bool,
}

/// Decides, and in scheduler mode adds the architecture constraint when the images
/// answer within the deadline.
pub async fn answer(
    state: &WebhookState,
    config: &WebhookConfig,
    body: Bytes,
) -> Result<(Value, Option<Decision>), ReviewError> {
    let (request, decided) = if body.len() > INLINE_PARSE_BYTES {
        parse_and_decide_off_the_workers(body, config).await?
    } else {
        decide_off_the_workers(parse(&body)?, config).await?
    };
    let (Some(mut decision), Some((pod, namespace))) = (decided, &request.pod) else {
        return Ok((respond(&request.uid, &[])?, None));
    };
    // A rule decided the architectures: no image to look up.
    if decision.routed()
        && decision.architecture_rule.is_none()
        && config.admission_affinity
        && let Some(lookup) = &state.lookup
    {
        let result = match lookup.lookup(pod, namespace).await {
            Lookup::Platforms(platforms) => {
                let (ops, result) =
                    constraint_patch(&request.sent, pod, namespace, config, &platforms);
                decision.patch.extend(ops);
                result
            }
            Lookup::Anywhere => AdmissionAffinityResult::Unconstrained,
            Lookup::TimedOut => AdmissionAffinityResult::TimedOut,
            Lookup::Busy => AdmissionAffinityResult::Busy,
            Lookup::Failed(error) => {
                debug!(%namespace, pod = ?pod.metadata.name, %error, "routed without the architecture constraint");
                AdmissionAffinityResult::Failed
            }
        };
        state
            .metrics
            .admission_affinity
            .get_or_create(&ReviewResultLabel {
                result: result.as_str(),
            })
            .inc();
    }
    Ok((respond(&request.uid, &decision.patch)?, Some(decision)))
}

/// Reviews larger than this are parsed one at a time on a blocking thread: a pod's
/// review is a few KiB, and a tenant's 4 MiB ones, parsed on the workers, held every
/// worker tens of milliseconds each while the API server's reviews and the kubelet's
/// probes waited behind them.
const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// One large review parsed at a time, in the whole process: a flood of them takes one
/// core at most, not every worker nor a blocking thread each. Those waiting hold only
/// their bodies (bounded in bytes by `RequestBodies`) and are cut at the request timeout.
static LARGE_REVIEW_LANE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

async fn parse_and_decide_off_the_workers(
    body: Bytes,
    config: &WebhookConfig,
) -> Result<(Request, Option<Decision>), ReviewError> {
    let lane = LARGE_REVIEW_LANE
        .acquire()
        .await
        .map_err(|e| ReviewError::Decode(format!("internal: {e}")))?;
    let config = config.clone();
    tokio::task::spawn_blocking(move || {
        // Held until the parse ends, even when the request was cut at its timeout meanwhile.
        let _lane = lane;
        let request = parse(&body)?;
        let decided = request.decide(&config);
        Ok((request, decided))
    })
    .await
    .map_err(|e| ReviewError::Decode(format!("internal: parsing failed: {e}")))?
}

/// The decision, on a blocking thread when a namespace admin's architecture rules may
/// run (their cost is bounded, not nothing: they must not hold the workers that read
/// the API server's other reviews); inline otherwise.
async fn decide_off_the_workers(
    request: Request,
    config: &WebhookConfig,
) -> Result<(Request, Option<Decision>), ReviewError> {
    let ruled = request
        .pod
        .as_ref()
        .is_some_and(|(_, namespace)| config.architecture_rules.governs_namespace(namespace));
    if !ruled {
        let decided = request.decide(config);
        return Ok((request, decided));
    }
    let config = config.clone();
    tokio::task::spawn_blocking(move || {
        let decided = request.decide(&config);
        (request, decided)
    })
    .await
    .map_err(|e| ReviewError::Decode(format!("internal: deciding failed: {e}")))
}

pub fn router(state: WebhookState) -> Router {
    let bodies = Arc::new(RequestBodies::for_reviews(POD_REVIEW_PRICES));
    let reviews = Router::new()
        // The mode of the ClusterPodPlacementConfig (installs without the operator).
        .route(
            "/mutate-pods",
            post(|state, body| mutate(state, body, None)),
        )
        // The mode the operator pinned in the webhook configuration: it switches modes by
        // switching the path, once the mode's components are available.
        .route(
            "/mutate-pods/scheduler",
            post(|state, body| mutate(state, body, Some(PlacementMode::Scheduler))),
        )
        .route(
            "/mutate-pods/gate",
            post(|state, body| mutate(state, body, Some(PlacementMode::SchedulingGate))),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .layer(axum::middleware::from_fn_with_state(bodies, within_budget))
        // Outermost: a caller without the certificate is refused before its body is read.
        .layer(axum::middleware::from_fn_with_state(
            state.reviews_need_client_certificate,
            certified_callers,
        ))
        .with_state(state.clone());
    reviews.merge(health_routes(state.registry.clone(), move || {
        state
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .not_ready()
    }))
}

/// What a pod review's objects cost parsed into a typed `Pod`, by the key that holds them
/// (k8s-openapi 0.29's sizes, rounded up, with room): the lists a pod may hold many of
/// are priced as their small items, not as the largest struct (a pod of 10,000 pull
/// secrets is 600 KiB of `LocalObjectReference`s, not 33 MiB); managed fields and the
/// maps of strings are free-form JSON. Any other object costs `json_shape::OBJECT_BYTES`.
const POD_REVIEW_PRICES: Prices = Prices {
    by_key: &[
        ("containers", 2560),
        ("initContainers", 2560),
        ("ephemeralContainers", 2560),
        ("imagePullSecrets", 64),
        ("schedulingGates", 64),
        ("readinessGates", 64),
        ("env", 512),
        ("envFrom", 256),
        ("volumeMounts", 256),
        ("volumeDevices", 128),
        ("ports", 256),
        ("tolerations", 256),
        ("hostAliases", 128),
        ("resizePolicy", 128),
        ("resourceClaims", 256),
        ("ownerReferences", 256),
        ("managedFields", 512),
        ("items", 256),
        ("matchExpressions", 256),
        ("matchFields", 256),
        ("nodeSelectorTerms", 256),
        ("topologySpreadConstraints", 512),
    ],
    subtrees: &[
        ("fieldsV1", 128),
        ("labels", 128),
        ("annotations", 128),
        ("nodeSelector", 128),
    ],
};

/// With `--client-ca`, a review from a caller that presented no client certificate is
/// refused (403): only the API server, whose certificate chains to that CA, has its pods
/// reviewed (the handshake already refused a certificate that does not chain to it).
async fn certified_callers(
    State(required): State<bool>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let certified = request
        .extensions()
        .get::<Peer>()
        .is_some_and(|peer| peer.verified_client_certificate);
    if required && !certified {
        return (
            StatusCode::FORBIDDEN,
            "reviews are answered only for callers with a client certificate from the --client-ca (the API server's)",
        )
            .into_response();
    }
    next.run(request).await
}

async fn mutate(
    State(state): State<WebhookState>,
    body: Bytes,
    mode: Option<PlacementMode>,
) -> Response {
    let started = Instant::now();
    let mut config = state
        .config
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if let Some(mode) = mode {
        config.mode = mode;
    }
    let answer = answer(&state, &config, body).await;
    let elapsed = started.elapsed().as_secs_f64();
    state.metrics.seconds.observe(elapsed);
    state.metrics.mto_seconds.observe(elapsed);
    state.metrics.mto_processed.inc();
    match answer {
        Ok((review, decision)) => {
            let result = match &decision {
                Some(d) if d.gated => {
                    state.metrics.mto_gated.inc();
                    "gated"
                }
                Some(d) if !d.patch.is_empty() && d.exemption.is_none() => "routed",
                Some(_) => "exempt",
                None => "ignored",
            };
            state
                .metrics
                .reviews
                .get_or_create(&ReviewResultLabel { result })
                .inc();
            debug!(?decision, "admission review answered");
            match serde_json::to_vec(&review) {
                Ok(bytes) => (
                    StatusCode::OK,
                    [("content-type", "application/json")],
                    bytes,
                )
                    .into_response(),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
            }
        }
        Err(e) => {
            // An HTTP error is a webhook failure: with failurePolicy Ignore the API
            // server admits the pod unchanged.
            state
                .metrics
                .reviews
                .get_or_create(&ReviewResultLabel { result: "error" })
                .inc();
            warn!(error = %e, "undecodable admission request");
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
    }
}

/// Serves the webhook on `listener` until `shutdown` is cancelled, then for the limits'
/// shutdown delay, then until the reviews in progress are answered.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<ServerConfig>,
    state: WebhookState,
    shutdown: CancellationToken,
) {
    serve_with(listener, tls, state, shutdown, ServerLimits::default()).await;
}

/// The webhook port's limits: the shared server's, a review answered (or cut) within 10 s
/// (the API server waits for one at most its `timeoutSeconds`: 5 s in the configuration
/// the operator writes, 30 s at most), and `shutdown_delay` of answering after SIGTERM.
pub fn webhook_limits(shutdown_delay: std::time::Duration) -> ServerLimits {
    ServerLimits {
        shutdown_delay,
        request_timeout: std::time::Duration::from_secs(10),
        ..ServerLimits::default()
    }
}

pub async fn serve_with(
    listener: tokio::net::TcpListener,
    tls: Arc<ServerConfig>,
    state: WebhookState,
    shutdown: CancellationToken,
    limits: ServerLimits,
) {
    multiarch_runtime::https_server::serve(listener, tls, router(state), shutdown, limits).await;
}

#[cfg(test)]
mod tests {
    use multiarch_runtime::json_shape::Shape;

    use super::*;

    fn recorded_review(n: usize) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
            "../tests/fixtures/admission/admissionreview-request-{n}.json"
        ));
        std::fs::read(path).unwrap()
    }

    /// While a large review holds the lane, another waits for it and a small one is
    /// answered meanwhile; once the lane is free the large one is answered.
    #[tokio::test]
    async fn large_reviews_are_parsed_one_at_a_time_and_small_ones_meanwhile() {
        let config =
            WebhookConfig::new(PlacementMode::Scheduler, "multiarch-scheduler", "multiarch");
        let mut registry = Registry::default();
        let metrics = WebhookMetrics::default();
        metrics.register(&mut registry);
        let state = WebhookState {
            config: Arc::new(RwLock::new(config.clone())),
            metrics,
            registry: Arc::new(registry),
            lookup: None,
            reviews_need_client_certificate: false,
        };
        let small = recorded_review(0);
        let mut large: Value = serde_json::from_slice(&small).unwrap();
        large["request"]["object"]["metadata"]["annotations"]["padding"] =
            Value::String("x".repeat(2 * INLINE_PARSE_BYTES));
        let large = serde_json::to_vec(&large).unwrap();
        assert!(small.len() <= INLINE_PARSE_BYTES && large.len() > INLINE_PARSE_BYTES);

        let held = LARGE_REVIEW_LANE.acquire().await.unwrap();
        let waiting = tokio::spawn({
            let (state, config) = (state.clone(), config.clone());
            async move { answer(&state, &config, Bytes::from(large)).await }
        });
        let (answered, _) = answer(&state, &config, Bytes::from(small)).await.unwrap();
        assert!(answered["response"]["uid"].is_string(), "{answered}");
        // Time enough to parse it ten times over (were it not waiting, it would be done;
        // while the lane is held it cannot be, however slow the machine).
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "a large review was parsed while the lane was held"
        );
        drop(held);
        let (answered, _) = waiting.await.unwrap().unwrap();
        assert!(answered["response"]["uid"].is_string(), "{answered}");
    }

    #[test]
    fn the_api_servers_pod_reviews_cost_a_small_review_and_many_pull_secrets_fit_a_share() {
        for n in 0..3 {
            let body = recorded_review(n);
            let cost = Shape::of(&body, POD_REVIEW_PRICES)
                .unwrap()
                .parsed_bytes(body.len());
            // The small reserve is for reviews up to 512 KiB.
            assert!(cost < 128 * 1024, "recorded review {n} costs {cost} bytes");
        }
        let secrets: Vec<String> = (0..10_000)
            .map(|i| format!(r#"{{"name":"s{i}"}}"#))
            .collect();
        let pod = format!(
            r#"{{"request":{{"object":{{"spec":{{"imagePullSecrets":[{}]}}}}}}}}"#,
            secrets.join(",")
        );
        let cost = Shape::of(pod.as_bytes(), POD_REVIEW_PRICES)
            .unwrap()
            .parsed_bytes(pod.len());
        assert!(cost < 2 * 1024 * 1024, "{cost}");
    }
}
