//! The HTTPS server of the roles the API server calls (the admission webhook, the
//! operator's conversion and validation webhooks): TLS 1.2+, a bound on connections, and
//! deadlines on the handshake and the request head, so idle or slow clients cannot starve
//! the API server's calls.

use std::{net::SocketAddr, sync::Arc};

use axum::Router;
use hyper_util::{rt::TokioIo, server::conn::auto, service::TowerToHyperService};
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// What a client may hold: idle or slow connections must not starve the API server's
/// admission calls.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// Connections at once; beyond it new ones are closed at accept.
    pub max_connections: usize,
    /// From accept to a finished TLS handshake.
    pub handshake_timeout: std::time::Duration,
    /// From connection (or the previous response) to a complete request head.
    pub header_timeout: std::time::Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 4096,
            handshake_timeout: std::time::Duration::from_secs(10),
            header_timeout: std::time::Duration::from_secs(10),
        }
    }
}

/// Serves HTTPS on `listener` until `shutdown` is cancelled; connections in progress
/// finish on their own (an admission review is one short request).
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    shutdown: CancellationToken,
    limits: ServerLimits,
) {
    let acceptor = TlsAcceptor::from(tls);
    let connections = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (socket, peer) = match accepted {
            Ok(connection) => connection,
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            debug!(%peer, "connection limit reached: closing");
            drop(socket);
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let stream =
                match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(socket)).await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        debug!(%peer, error = %e, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let service = TowerToHyperService::new(app);
            let mut builder = auto::Builder::new(hyper_util::rt::TokioExecutor::new());
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_timeout);
            if let Err(e) = builder
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
