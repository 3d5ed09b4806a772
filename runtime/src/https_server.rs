//! The HTTPS server of the roles the API server calls (the admission webhook, the
//! operator's conversion and validation webhooks): TLS 1.2+, with the bounds and the
//! graceful shutdown of [`crate::bounded_server`], so idle or slow clients cannot starve
//! the API server's calls.

use std::{net::SocketAddr, sync::Arc};

use axum::Router;
use rustls::ServerConfig;
use tokio_util::sync::CancellationToken;

use crate::server_limits::ServerLimits;

/// Serves HTTPS on `listener` until `shutdown` is cancelled, then drains as
/// [`crate::bounded_server::serve`] says.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: CancellationToken,
    limits: ServerLimits,
) {
    crate::bounded_server::serve(listener, Some(tls), app, shutdown, limits).await;
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}
