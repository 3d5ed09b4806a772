//! The one HTTP connection loop every served port uses (the webhooks over TLS, the
//! operations server in plain HTTP): a bound on connections, and deadlines on the TLS
//! handshake and on each request head, so idle or slow clients cannot starve the callers
//! that matter (the API server's admission calls, the kubelet's probes, Prometheus).

use std::{future::Future, net::SocketAddr, sync::Arc};

use axum::Router;
use hyper_util::{rt::TokioIo, server::conn::auto, service::TowerToHyperService};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// What a client may hold.
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

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` is
/// cancelled; connections in progress finish on their own (each request is short).
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<ServerConfig>>,
    app: Router,
    shutdown: CancellationToken,
    limits: ServerLimits,
) {
    let acceptor = tls.map(TlsAcceptor::from);
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
            let Some(acceptor) = acceptor else {
                return serve_connection(socket, app, limits, peer).await;
            };
            match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(socket)).await {
                Ok(Ok(stream)) => serve_connection(stream, app, limits, peer).await,
                Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

async fn serve_connection<S>(stream: S, app: Router, limits: ServerLimits, peer: SocketAddr)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let stream = OpeningDeadline::new(stream, limits.header_timeout);
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
}

/// Bytes hyper-util reads to tell HTTP/2 (its 24-byte preface) from HTTP/1.
const PROTOCOL_DETECTION_BYTES: usize = 24;

/// A deadline on a connection's first bytes. hyper-util's protocol detection has no timer
/// and hyper's `header_read_timeout` starts only after it, so a client that connects and
/// sends nothing (or a byte) would hold its connection, and a slot of the limit, forever.
/// Reads fail with `TimedOut` once `deadline` passes before the first
/// [`PROTOCOL_DETECTION_BYTES`] arrived; then hyper's own timers apply.
struct OpeningDeadline<S> {
    inner: S,
    deadline: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    read: usize,
}

impl<S> OpeningDeadline<S> {
    fn new(inner: S, deadline: std::time::Duration) -> Self {
        OpeningDeadline {
            inner,
            deadline: Some(Box::pin(tokio::time::sleep(deadline))),
            read: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for OpeningDeadline<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = polled {
            this.read += buf.filled().len() - before;
            if this.read >= PROTOCOL_DETECTION_BYTES || buf.filled().len() == before {
                this.deadline = None;
            }
            return polled;
        }
        if let Some(deadline) = &mut this.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            return std::task::Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no request within the deadline",
            )));
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for OpeningDeadline<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
