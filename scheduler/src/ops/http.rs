//! The operations endpoint of every role: `/metrics` (Prometheus text), `/healthz`,
//! `/readyz`.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use anyhow::Context;
use axum::{
    Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::{encoding::text::encode, registry::Registry};

#[derive(Clone)]
pub struct OpsState {
    pub registry: Arc<Registry>,
    pub ready: Arc<AtomicBool>,
}

pub fn router(state: OpsState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(state): State<OpsState>) -> Response {
    metrics_response(&state.registry)
}

/// The registry in Prometheus/OpenMetrics text, for every role's `/metrics`.
pub fn metrics_response(registry: &Registry) -> Response {
    let mut body = String::new();
    match encode(&mut body, registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            e.to_string(),
        )
            .into_response(),
    }
}

async fn readyz(State(state): State<OpsState>) -> impl IntoResponse {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Serves in the background; a failure (the port is taken) is logged, the role goes on.
pub fn spawn(addr: SocketAddr, state: OpsState) {
    tokio::spawn(async move {
        if let Err(e) = serve(addr, state).await {
            tracing::error!(error = %e, "operations endpoint stopped");
        }
    });
}

/// Serves until the process ends.
pub async fn serve(addr: SocketAddr, state: OpsState) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for metrics and health"))?;
    axum::serve(listener, router(state))
        .await
        .context("metrics server failed")
}
