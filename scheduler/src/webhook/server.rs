//! The HTTPS server: `/mutate-pods` (AdmissionReview), `/healthz`, `/readyz`, `/metrics`.
//! It never blocks a request on anything but its own decision.

use std::{
    net::SocketAddr,
    sync::{Arc, RwLock},
    time::Instant,
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use hyper_util::{rt::TokioIo, server::conn::auto, service::TowerToHyperService};
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, histogram::Histogram},
    registry::Registry,
};
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use super::{decision::WebhookConfig, review::review};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

/// MTO's webhook metric names are kept for its dashboards (gate mode); ours are
/// `multiarch_webhook_*`.
#[derive(Clone, Debug)]
pub struct WebhookMetrics {
    pub reviews: Family<ResultLabel, Counter>,
    pub seconds: Histogram,
    pub mto_processed: Counter,
    pub mto_gated: Counter,
    pub mto_seconds: Histogram,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        let buckets = [
            0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9,
            1.0, 2.0, 4.0,
        ];
        WebhookMetrics {
            reviews: Family::default(),
            seconds: Histogram::new(buckets),
            mto_processed: Counter::default(),
            mto_gated: Counter::default(),
            mto_seconds: Histogram::new(buckets),
        }
    }
}

impl WebhookMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let sub = registry.sub_registry_with_prefix("multiarch_webhook");
        sub.register(
            "reviews",
            "Admission reviews by result (routed, gated, exempt, error)",
            self.reviews.clone(),
        );
        sub.register(
            "review_duration_seconds",
            "Time to answer an admission review",
            self.seconds.clone(),
        );
        registry.register(
            "mto_ppo_wh_pods_processed",
            "Pods processed by the webhook (MTO name)",
            self.mto_processed.clone(),
        );
        registry.register(
            "mto_ppo_wh_pods_gated",
            "Pods gated by the webhook (MTO name)",
            self.mto_gated.clone(),
        );
        registry.register(
            "mto_ppo_wh_response_time_seconds",
            "Webhook response time (MTO name)",
            self.mto_seconds.clone(),
        );
    }
}

#[derive(Clone)]
pub struct WebhookState {
    pub config: Arc<RwLock<WebhookConfig>>,
    pub metrics: WebhookMetrics,
    pub registry: Arc<Registry>,
}

pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/mutate-pods", post(mutate))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ready" }))
        .route("/metrics", get(metrics))
        .with_state(state)
}

async fn mutate(State(state): State<WebhookState>, body: Bytes) -> Response {
    let started = Instant::now();
    let config = state
        .config
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let answer = review(&body, &config);
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
                .get_or_create(&ResultLabel { result })
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
                .get_or_create(&ResultLabel { result: "error" })
                .inc();
            warn!(error = %e, "undecodable admission request");
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
    }
}

async fn metrics(State(state): State<WebhookState>) -> Response {
    crate::ops::http::metrics_response(&state.registry)
}

/// Serves HTTPS on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, tls: Arc<ServerConfig>, state: WebhookState) {
    let acceptor = TlsAcceptor::from(tls);
    let app = router(state);
    loop {
        let Ok((socket, peer)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(socket).await {
                Ok(s) => s,
                Err(e) => {
                    debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let service = TowerToHyperService::new(app);
            if let Err(e) = auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
