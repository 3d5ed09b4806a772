//! The operations endpoint of every role: `/metrics` (Prometheus text), `/healthz`,
//! `/readyz`.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::{encoding::text::encode, registry::Registry};
use tokio_util::sync::CancellationToken;

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

/// Serves until `shutdown` is cancelled; an error (the port is taken) ends the role.
pub async fn serve(
    addr: SocketAddr,
    state: OpsState,
    shutdown: CancellationToken,
) -> Result<(), OpsServerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| OpsServerError::Bind { addr, source })?;
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|source| OpsServerError::Serve { addr, source })
}

#[derive(Debug, thiserror::Error)]
pub enum OpsServerError {
    #[error("cannot listen on {addr} for metrics and health: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the metrics and health server on {addr} failed: {source}")]
    Serve {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn health_readiness_and_metrics() {
        let ready = Arc::new(AtomicBool::new(false));
        let mut registry = Registry::default();
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        registry.register("multiarch_test_things", "Things", counter.clone());
        counter.inc();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let token = CancellationToken::new();
        let state = OpsState {
            registry: Arc::new(registry),
            ready: ready.clone(),
        };
        let server = tokio::spawn(serve(addr, state, token.clone()));
        let get = |path: &'static str| async move {
            for _ in 0..100 {
                if let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let request =
                        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                    stream.write_all(request.as_bytes()).await.unwrap();
                    let mut response = String::new();
                    stream.read_to_string(&mut response).await.unwrap();
                    return response;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            panic!("the server never listened");
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        ready.store(true, Ordering::Relaxed);
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(
            get("/metrics")
                .await
                .contains("multiarch_test_things_total 1")
        );
        token.cancel();
        server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_taken_port_is_an_error() {
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let state = OpsState {
            registry: Arc::new(Registry::default()),
            ready: Arc::new(AtomicBool::new(true)),
        };
        let error = serve(taken.local_addr().unwrap(), state, CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            error.to_string().starts_with("cannot listen on 127.0.0.1:"),
            "{error}"
        );
    }
}
