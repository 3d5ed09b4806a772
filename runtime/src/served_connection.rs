//! One served connection: HTTP/1 or HTTP/2 (detected), with a deadline on its first
//! bytes, HTTP/2 keep-alive pings, an idle timeout, and a graceful close when the server
//! drains, so a connection can hold its slot only while it is used.

use std::{
    future::Future,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{Router, http::StatusCode, response::IntoResponse};
use hyper_util::{rt::TokioIo, server::conn::auto, service::TowerToHyperService};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::debug;

use crate::{peer::Peer, server_limits::ServerLimits};

/// HTTP/2 pings: a peer that stops answering them is gone, and its connection closed.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Requests in flight on a connection and when the last one ended.
struct Activity {
    in_flight: AtomicUsize,
    last: Mutex<Instant>,
}

impl Activity {
    fn new() -> Self {
        Activity {
            in_flight: AtomicUsize::new(0),
            last: Mutex::new(Instant::now()),
        }
    }

    fn touch(&self) {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }

    /// Resolves once no request has been in flight for `idle`.
    async fn idle(&self, idle: Duration) {
        loop {
            let since = self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .elapsed();
            if self.in_flight.load(Ordering::SeqCst) == 0 && since >= idle {
                return;
            }
            tokio::time::sleep(idle.saturating_sub(since).max(Duration::from_millis(50))).await;
        }
    }
}

/// Counts a request in flight for as long as it lives (its response is being made).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn begin(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::SeqCst);
        activity.touch();
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves `app` on `stream` until the peer closes it, it errs, it has been idle for
/// `limits.idle_timeout`, or `stop` asks the server to drain; the last two close it
/// gracefully (requests in flight finish; HTTP/2 peers get GOAWAY).
pub(crate) async fn serve_connection<S>(
    stream: S,
    app: Router,
    limits: ServerLimits,
    peer: Peer,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let stream = OpeningDeadline::new(stream, limits.header_timeout);
    let activity = Arc::new(Activity::new());
    let tracked = activity.clone();
    let request_timeout = limits.request_timeout;
    let service = tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(peer);
        let app = app.clone();
        let in_flight = InFlight::begin(&tracked);
        async move {
            // A body sent a byte at a time (or a handler stuck) holds the request, and so
            // the connection, only this long.
            let response = match tokio::time::timeout(request_timeout, app.oneshot(request)).await {
                Ok(response) => response,
                Err(_) => Ok((
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the request was not received and answered within {request_timeout:?}"),
                )
                    .into_response()),
            };
            drop(in_flight);
            response
        }
    });
    let mut builder = auto::Builder::new(hyper_util::rt::TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(KEEP_ALIVE_INTERVAL))
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT);
    let connection =
        builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(connection);
    // Once a graceful close began, a peer that does not take part in it (an HTTP/2
    // client that never answers the GOAWAY) is dropped at the drain timeout.
    let mut closing = false;
    let close_deadline = tokio::time::sleep(limits.drain_timeout);
    tokio::pin!(close_deadline);
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    debug!(peer = %peer.address, error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut close_deadline, if closing => {
                debug!(peer = %peer.address, "connection dropped: it did not close in time");
                return;
            }
            () = stop.cancelled(), if !closing => {
                closing = true;
                close_deadline.as_mut().reset(tokio::time::Instant::now() + limits.drain_timeout);
                connection.as_mut().graceful_shutdown();
            }
            () = activity.idle(limits.idle_timeout), if !closing => {
                debug!(peer = %peer.address, "idle connection closed");
                closing = true;
                close_deadline.as_mut().reset(tokio::time::Instant::now() + limits.drain_timeout);
                connection.as_mut().graceful_shutdown();
            }
        }
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
