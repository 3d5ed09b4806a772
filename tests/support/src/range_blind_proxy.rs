//! A registry that does not serve ranges: a plain-HTTP proxy in front of a real one that
//! drops every request's `Range` header, so each blob is answered whole (`200`), as by a
//! registry or a cache in front of it that ignores ranges. GET requests only (no bodies),
//! one after another on each connection, as a registry client sends them.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

/// The proxy's address, and how many `Range` headers it dropped.
pub async fn range_blind_proxy(upstream: &str) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let dropped = Arc::new(AtomicUsize::new(0));
    let counter = dropped.clone();
    let upstream = upstream.to_owned();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            tokio::spawn(relay(client, server, counter.clone()));
        }
    });
    (addr, dropped)
}

async fn relay(client: TcpStream, server: TcpStream, dropped: Arc<AtomicUsize>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
    });
    let mut pending = Vec::new();
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let Ok(n) = from_client.read(&mut buffer).await else {
            return;
        };
        if n == 0 {
            return;
        }
        pending.extend_from_slice(&buffer[..n]);
        // Each complete request head, its Range header dropped.
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = pending.drain(..end + 4).collect();
            let head = String::from_utf8_lossy(&head).into_owned();
            let mut kept = String::new();
            for line in head.split_inclusive("\r\n") {
                if line.to_ascii_lowercase().starts_with("range:") {
                    dropped.fetch_add(1, Ordering::SeqCst);
                } else {
                    kept.push_str(line);
                }
            }
            if to_server.write_all(kept.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}
