//! One served connection: HTTP/1 or HTTP/2 (detected), with a deadline on each request
//! head (from its first byte), HTTP/2 keep-alive pings, an idle timeout, and a graceful
//! close when the server drains, so a connection can hold its slot only while it is used.

use std::{sync::Arc, time::Duration};

use axum::{Router, http::StatusCode, response::IntoResponse};
use hyper_util::{rt::TokioIo, server::conn::auto, service::TowerToHyperService};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::debug;

use crate::{
    connection_activity::{Activity, InFlight},
    head_deadline::HeadDeadline,
    peer::Peer,
    server_limits::ServerLimits,
};

/// HTTP/2 pings: a peer that stops answering them is gone, and its connection closed.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

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
    let activity = Arc::new(Activity::new());
    let stream = HeadDeadline::new(stream, limits.header_timeout, activity.clone());
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
    // hyper's header timer (30 s unless set) would also run while a kept-alive
    // connection waits for its next request: `HeadDeadline` times heads instead.
    builder.http1().header_read_timeout(None);
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
