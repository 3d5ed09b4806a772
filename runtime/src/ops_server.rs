//! The operations endpoint of every role: `/metrics` (Prometheus text), `/healthz`,
//! `/readyz`, with the connection bounds of every served port: a client holding idle
//! connections cannot keep the kubelet's probes (and so the pod) from being answered.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::{encoding::text::encode, registry::Registry};
use tokio_util::sync::CancellationToken;

use crate::{bounded_server, server_limits::ServerLimits};

/// Probes and scrapes are a few connections at a time.
pub const OPS_LIMITS: ServerLimits = ServerLimits {
    max_connections: 256,
    max_connections_per_peer: 64,
    handshake_timeout: std::time::Duration::from_secs(10),
    header_timeout: std::time::Duration::from_secs(10),
    idle_timeout: std::time::Duration::from_secs(120),
    request_timeout: std::time::Duration::from_secs(10),
    shutdown_delay: std::time::Duration::ZERO,
    drain_timeout: std::time::Duration::from_secs(5),
};

#[derive(Clone)]
pub struct OpsState {
    pub registry: Arc<Registry>,
    pub ready: Arc<AtomicBool>,
}

pub fn router(state: OpsState) -> Router {
    let ready = state.ready;
    health_routes(state.registry, move || {
        (!ready.load(Ordering::Relaxed)).then_some("not ready")
    })
}

/// `/metrics` (from `registry`), `/healthz` and `/readyz` (503 with the reason
/// `not_ready` gives, 200 when it gives none): the operations endpoint, or the same
/// routes beside a role's own on its serving port (the webhooks).
pub fn health_routes(
    registry: Arc<Registry>,
    not_ready: impl Fn() -> Option<&'static str> + Clone + Send + Sync + 'static,
) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(metrics_response(&registry))),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                std::future::ready(match not_ready() {
                    None => (StatusCode::OK, "ready"),
                    Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
                })
            }),
        )
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

/// Serves until `shutdown` is cancelled; an error (the port is taken) ends the role.
pub async fn serve(
    addr: SocketAddr,
    state: OpsState,
    shutdown: CancellationToken,
) -> Result<(), OpsServerError> {
    serve_with(addr, state, shutdown, OPS_LIMITS).await
}

/// [`serve`] with other limits.
pub async fn serve_with(
    addr: SocketAddr,
    state: OpsState,
    shutdown: CancellationToken,
    limits: ServerLimits,
) -> Result<(), OpsServerError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| OpsServerError::Bind { addr, source })?;
    bounded_server::serve(listener, None, router(state), shutdown, limits).await;
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum OpsServerError {
    #[error("cannot listen on {addr} for metrics and health: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nothing listens on (the server under test binds it).
    async fn free_port() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    }

    /// A connection to `addr`, once the server listens.
    async fn connect(addr: SocketAddr) -> tokio::net::TcpStream {
        for _ in 0..100 {
            if let Ok(stream) = tokio::net::TcpStream::connect(addr).await {
                return stream;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the server never listened");
    }

    /// The whole response to `GET path` on a new connection.
    async fn get(addr: SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = connect(addr).await;
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn health_readiness_and_metrics() {
        let ready = Arc::new(AtomicBool::new(false));
        let mut registry = Registry::default();
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        registry.register("multiarch_test_things", "Things", counter.clone());
        counter.inc();
        let addr = free_port().await;
        let token = CancellationToken::new();
        let state = OpsState {
            registry: Arc::new(registry),
            ready: ready.clone(),
        };
        let server = tokio::spawn(serve(addr, state, token.clone()));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        ready.store(true, Ordering::Relaxed);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(
            get(addr, "/metrics")
                .await
                .contains("multiarch_test_things_total 1")
        );
        token.cancel();
        server.await.unwrap().unwrap();
    }

    /// Connections that never send a request take no more than the limit and are closed
    /// at the header deadline; the probe after them is answered.
    #[tokio::test]
    async fn idle_connections_are_bounded_and_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = free_port().await;
        let state = OpsState {
            registry: Arc::new(Registry::default()),
            ready: Arc::new(AtomicBool::new(true)),
        };
        let limits = ServerLimits {
            max_connections: 2,
            header_timeout: std::time::Duration::from_millis(500),
            ..OPS_LIMITS
        };
        let token = CancellationToken::new();
        let server = tokio::spawn(serve_with(addr, state, token.clone(), limits));
        // Two connections that send nothing hold both slots: a third is closed at accept.
        // (Should the server be so slow that the deadline freed a slot before the third
        // was accepted, the round is tried again.)
        let mut idle = Vec::new();
        let mut refused = false;
        for _ in 0..20 {
            idle = vec![connect(addr).await, connect(addr).await];
            let mut third = connect(addr).await;
            let _ = third
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await;
            let mut answer = Vec::new();
            let _ = third.read_to_end(&mut answer).await;
            if answer.is_empty() {
                refused = true;
                break;
            }
        }
        assert!(refused, "a connection over the limit was served");
        // The idle ones are closed at the header deadline (end of stream, no answer).
        for stream in &mut idle {
            let mut rest = Vec::new();
            // (A generous bound, so that a server that never closes them fails, not hangs.)
            tokio::time::timeout(
                std::time::Duration::from_secs(60),
                stream.read_to_end(&mut rest),
            )
            .await
            .expect("an idle connection was never closed")
            .unwrap();
            assert!(rest.is_empty(), "no answer to no request");
        }
        let answer = get(addr, "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
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
