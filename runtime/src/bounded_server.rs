//! The one HTTP connection loop every served port uses (the webhooks and the inspector
//! over TLS, the operations server in plain HTTP): a bound on connections in all and per
//! peer address, deadlines on the TLS handshake and on each request head, an idle
//! timeout, so idle or slow clients cannot starve the callers that matter (the API
//! server's admission calls, the kubelet's probes, Prometheus); and a shutdown that
//! drops no request: the port keeps serving for a delay (while the endpoint is removed
//! from its Service, `/readyz` answering 503), then stops accepting and lets the
//! connections finish what they were asked.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{
    Router,
    extract::{Request, State},
    http::StatusCode,
    middleware::Next,
    response::{IntoResponse, Response},
};
use rustls::ServerConfig;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::{peer::Peer, served_connection::serve_connection, server_limits::ServerLimits};

/// Connections per peer address.
#[derive(Default)]
struct Peers(Mutex<HashMap<IpAddr, usize>>);

/// One connection's place in [`Peers`], given back when dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut counts = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = counts.entry(ip).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self
            .peers
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// `/readyz` answers 503 once the port is shutting down; everything else is served.
async fn not_ready_while_draining(
    State(draining): State<Arc<AtomicBool>>,
    request: Request,
    next: Next,
) -> Response {
    if draining.load(Ordering::SeqCst) && request.uri().path() == "/readyz" {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response();
    }
    next.run(request).await
}

/// What every accepted connection shares.
struct Accepting {
    acceptor: Option<TlsAcceptor>,
    app: Router,
    limits: ServerLimits,
    connections: Arc<Semaphore>,
    peers: Arc<Peers>,
    /// Cancelled when the connections must close (gracefully).
    stop: CancellationToken,
}

impl Accepting {
    fn admit(&self, socket: tokio::net::TcpStream, peer: SocketAddr) {
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            debug!(%peer, "connection limit reached: closing");
            return;
        };
        let Some(slot) = self
            .peers
            .take(peer.ip(), self.limits.max_connections_per_peer)
        else {
            debug!(%peer, "connection limit for this address reached: closing");
            return;
        };
        let (acceptor, app, limits, stop) = (
            self.acceptor.clone(),
            self.app.clone(),
            self.limits,
            self.stop.clone(),
        );
        tokio::spawn(async move {
            let _held: (OwnedSemaphorePermit, PeerSlot) = (permit, slot);
            let Some(acceptor) = acceptor else {
                let peer = Peer {
                    address: peer,
                    verified_client_certificate: false,
                };
                return serve_connection(socket, app, limits, peer, stop).await;
            };
            let handshake = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(socket));
            match handshake.await {
                Ok(Ok(stream)) => {
                    // rustls hands on a client certificate only once its verifier
                    // accepted it.
                    let verified_client_certificate =
                        stream.get_ref().1.peer_certificates().is_some();
                    let peer = Peer {
                        address: peer,
                        verified_client_certificate,
                    };
                    serve_connection(stream, app, limits, peer, stop).await;
                }
                Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Accepts until `until` resolves.
async fn accept_until(
    listener: &tokio::net::TcpListener,
    accepting: &Accepting,
    until: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(until);
    loop {
        let accepted = tokio::select! {
            () = &mut until => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((socket, peer)) => accepting.admit(socket, peer),
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` is
/// cancelled, then for `limits.shutdown_delay` more (not ready), then lets open
/// connections finish for at most `limits.drain_timeout`; returns when they have.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<ServerConfig>>,
    app: Router,
    shutdown: CancellationToken,
    limits: ServerLimits,
) {
    let draining = Arc::new(AtomicBool::new(false));
    let app = app.layer(axum::middleware::from_fn_with_state(
        draining.clone(),
        not_ready_while_draining,
    ));
    let accepting = Accepting {
        acceptor: tls.map(TlsAcceptor::from),
        app,
        limits,
        connections: Arc::new(Semaphore::new(limits.max_connections)),
        peers: Arc::default(),
        stop: CancellationToken::new(),
    };
    accept_until(&listener, &accepting, shutdown.cancelled()).await;
    draining.store(true, Ordering::SeqCst);
    if !limits.shutdown_delay.is_zero() {
        info!(delay = ?limits.shutdown_delay, "shutting down: serving on while the endpoint is removed");
        accept_until(
            &listener,
            &accepting,
            tokio::time::sleep(limits.shutdown_delay),
        )
        .await;
    }
    drop(listener);
    accepting.stop.cancel();
    let every = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(
        limits.drain_timeout,
        accepting.connections.acquire_many(every),
    )
    .await;
    if drained.is_err() {
        let open = limits.max_connections - accepting.connections.available_permits();
        warn!(open, timeout = ?limits.drain_timeout, "connections still open after the drain timeout");
    }
}
