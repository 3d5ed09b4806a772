//! The served ports' connection loop: an idle connection (HTTP/1 or HTTP/2) is closed
//! at the idle timeout, a request head is timed from its first byte (a kept-alive
//! connection waits for its next request past the header timeout), and shutdown drops no
//! request: the port goes on serving through the delay (not ready), then finishes what it
//! was asked before it returns.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{Router, routing::get};
use multiarch_runtime::bounded_server::serve;
use multiarch_runtime::server_limits::ServerLimits;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    sync::Notify,
};
use tokio_util::sync::CancellationToken;

/// The HTTP/2 connection preface and an empty SETTINGS frame: what a client sends before
/// its first request.
const H2_OPENING: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The whole response to `GET path` on a new connection, or the error that ended it.
async fn get_once(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

async fn start(
    app: Router,
    limits: ServerLimits,
) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(listener, None, app, shutdown.clone(), limits));
    (addr, shutdown, server)
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed_at_the_idle_timeout() {
    let app = Router::new().route("/readyz", get(|| async { "ready" }));
    let (addr, _shutdown, _server) = start(
        app,
        ServerLimits {
            idle_timeout: Duration::from_millis(200),
            // This client never answers the GOAWAY: dropped at the drain timeout.
            drain_timeout: Duration::from_millis(500),
            ..ServerLimits::default()
        },
    )
    .await;
    let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    idle.write_all(H2_OPENING).await.unwrap();
    // The server's SETTINGS, then (idle) its GOAWAY and the end of the connection.
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), idle.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "the idle connection was never closed");
    // A GOAWAY frame (type 7) is among what the server sent: a graceful close.
    assert!(
        received
            .windows(4)
            .any(|w| w[3] == 0x07 && w[0] == 0 && w[1] == 0),
        "{received:?}"
    );
}

/// Reads from `stream` until what was received satisfies `done`, or the stream ends.
async fn read_until(
    stream: &mut tokio::net::TcpStream,
    done: impl Fn(&[u8]) -> bool,
) -> std::io::Result<Vec<u8>> {
    let mut received = Vec::new();
    let mut buffer = [0u8; 1024];
    while !done(&received) {
        let n = stream.read(&mut buffer).await?;
        if n == 0 {
            break;
        }
        received.extend_from_slice(&buffer[..n]);
    }
    Ok(received)
}

/// Whether the stream is closed (or reset) by the server within a minute: generous, so
/// that a server that never closes it fails the test rather than hangs it.
async fn closed_by_server(stream: &mut tokio::net::TcpStream) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut rest))
        .await
        .is_ok()
}

const READYZ: &[u8] = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n";

/// A server whose header timeout is short and idle timeout an hour: what closes a
/// connection in these tests is the header deadline or nothing.
async fn start_with_short_header_timeout() -> (SocketAddr, CancellationToken) {
    let app = Router::new().route("/readyz", get(|| async { "ready" }));
    let (addr, shutdown, _server) = start(
        app,
        ServerLimits {
            header_timeout: Duration::from_millis(100),
            idle_timeout: Duration::from_secs(3600),
            ..ServerLimits::default()
        },
    )
    .await;
    (addr, shutdown)
}

/// A connection to `addr` whose first request has been answered: kept alive, idle.
async fn answered_connection(addr: SocketAddr) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(READYZ).await.unwrap();
    let first = read_until(&mut stream, |r| r.ends_with(b"ready"))
        .await
        .unwrap();
    assert!(first.starts_with(b"HTTP/1.1 200"), "{first:?}");
    stream
}

/// kube-apiserver keeps its webhook connections open 90 s between requests: a kept-alive
/// HTTP/1 connection idle past the header timeout still answers its next request (hyper's
/// own header timer closed it 10 s after its last response).
#[tokio::test]
async fn a_kept_alive_http1_connection_outlives_the_header_timeout() {
    let (addr, _shutdown) = start_with_short_header_timeout().await;
    let mut stream = answered_connection(addr).await;
    // Idle for several header timeouts (a slower machine only waits longer).
    tokio::time::sleep(Duration::from_millis(500)).await;
    stream.write_all(READYZ).await.unwrap();
    let second = read_until(&mut stream, |r| r.ends_with(b"ready")).await;
    let second = String::from_utf8_lossy(&second.unwrap_or_default()).into_owned();
    assert!(
        second.starts_with("HTTP/1.1 200"),
        "the kept-alive connection was closed while idle: {second:?}"
    );
}

/// A kept-alive HTTP/1 connection with no request is closed at the idle timeout, and
/// gracefully: a clean end of stream after the last response, with no drain to wait for
/// (the drain timeout is an hour, the header timeout too, so nothing else can close it).
#[tokio::test]
async fn an_idle_http1_connection_is_closed_gracefully_at_the_idle_timeout() {
    let app = Router::new().route("/readyz", get(|| async { "ready" }));
    let (addr, _shutdown, _server) = start(
        app,
        ServerLimits {
            header_timeout: Duration::from_secs(3600),
            idle_timeout: Duration::from_millis(200),
            drain_timeout: Duration::from_secs(3600),
            ..ServerLimits::default()
        },
    )
    .await;
    let mut stream = answered_connection(addr).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut rest)).await;
    let Ok(ended) = read else {
        panic!("the idle connection was never closed");
    };
    assert!(
        ended.is_ok(),
        "closed abruptly (reset), not gracefully: {ended:?}"
    );
    assert!(rest.is_empty(), "sent after its last response: {rest:?}");
}

/// The next head on a kept-alive connection is timed from its first byte: one that
/// never completes is cut at the header timeout, not the idle timeout.
#[tokio::test]
async fn a_head_left_unfinished_on_a_kept_alive_connection_is_cut_at_the_header_timeout() {
    let (addr, _shutdown) = start_with_short_header_timeout().await;
    let mut stream = answered_connection(addr).await;
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHo")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut stream).await,
        "an unfinished head held the connection"
    );
}

/// A first head sent past the bytes that tell HTTP/1 from HTTP/2, then left unfinished,
/// is cut at the header timeout too.
#[tokio::test]
async fn a_first_head_left_unfinished_is_cut_at_the_header_timeout() {
    let (addr, _shutdown) = start_with_short_header_timeout().await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nUser-Agent: slow")
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut stream).await,
        "an unfinished head held the connection"
    );
}

/// Nothing of the head deadline applies to HTTP/2 after its preface: an HTTP/2
/// connection idle past the header timeout still answers a PING.
#[tokio::test]
async fn an_http2_connection_is_not_cut_at_the_header_timeout() {
    let (addr, _shutdown) = start_with_short_header_timeout().await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(H2_OPENING).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // PING (type 6) with an 8-byte payload; the answer is a PING with the ACK flag (1).
    let ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00multiarc";
    stream.write_all(ping).await.unwrap();
    let ack = [0u8, 0, 8, 6, 1, 0, 0, 0, 0];
    let received = read_until(&mut stream, |r| r.windows(9).any(|w| w == ack))
        .await
        .unwrap_or_default();
    assert!(
        received.windows(9).any(|w| w == ack),
        "no PING answered: {received:?}"
    );
}

#[tokio::test]
async fn shutdown_serves_through_the_delay_and_finishes_requests_in_flight() {
    let release = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let (held, arrived) = (release.clone(), entered.clone());
    let app = Router::new()
        .route("/readyz", get(|| async { "ready" }))
        .route("/fast", get(|| async { "fast" }))
        .route(
            "/slow",
            get(move || {
                let (held, arrived) = (held.clone(), arrived.clone());
                async move {
                    arrived.notify_one();
                    held.notified().await;
                    "slow"
                }
            }),
        );
    let (addr, shutdown, server) = start(
        app,
        ServerLimits {
            shutdown_delay: Duration::from_secs(3),
            drain_timeout: Duration::from_secs(30),
            ..ServerLimits::default()
        },
    )
    .await;
    assert!(
        get_once(addr, "/readyz")
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    let slow = tokio::spawn(get_once(addr, "/slow"));
    entered.notified().await;

    shutdown.cancel();
    // Within the delay: not ready, but new connections are still served.
    let mut not_ready = false;
    for _ in 0..100 {
        let readyz = get_once(addr, "/readyz").await.unwrap();
        if readyz.starts_with("HTTP/1.1 503") {
            not_ready = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(not_ready, "/readyz never said the port is shutting down");
    assert!(get_once(addr, "/fast").await.unwrap().ends_with("fast"));

    // The request in flight since before the shutdown gets its answer.
    release.notify_one();
    let answer = slow.await.unwrap().unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("slow"),
        "{answer}"
    );
    tokio::time::timeout(Duration::from_secs(60), server)
        .await
        .expect("the server returns once drained")
        .unwrap();
    assert!(
        get_once(addr, "/fast").await.is_err(),
        "the listener is closed"
    );
}

/// A request whose body arrives a byte at a time is answered 408 at the request timeout,
/// so it cannot hold its connection (and a slot) for as long as the client likes.
#[tokio::test]
async fn a_slow_body_gets_408_at_the_request_timeout() {
    let app = Router::new().route(
        "/mutate",
        axum::routing::post(
            |body: axum::body::Bytes| async move { format!("{} bytes", body.len()) },
        ),
    );
    let (addr, _shutdown, _server) = start(
        app,
        ServerLimits {
            request_timeout: Duration::from_millis(300),
            ..ServerLimits::default()
        },
    )
    .await;
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
        .await
        .unwrap();
    // Never more of the body; the answer comes anyway.
    let mut response = vec![0u8; 512];
    let read = tokio::time::timeout(Duration::from_secs(60), slow.read(&mut response))
        .await
        .expect("no answer to a stalled body")
        .unwrap();
    let text = String::from_utf8_lossy(&response[..read]).into_owned();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");

    // A whole body in time is answered as usual.
    let mut quick = tokio::net::TcpStream::connect(addr).await.unwrap();
    quick
        .write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
        .await
        .unwrap();
    let mut answer = String::new();
    quick.read_to_string(&mut answer).await.unwrap();
    assert!(answer.ends_with("3 bytes"), "{answer}");
}
