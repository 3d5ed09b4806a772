//! The inspector's health probe (grpc.health.v1), which the scheduler's readiness
//! follows: answered by a serving inspector, and by one without the health service;
//! refused and hung inspectors are errors that say why, within the deadline.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use multiarch_inspector::{
    ImageInspector, InspectError, InspectRequest,
    grpc::{self, InspectorService, RemoteInspector, ServiceLimits},
    image::ImageInfo,
};
use tokio_util::sync::CancellationToken;

/// An inspector that must never be asked: a probe inspects nothing.
struct NeverAsked;

#[async_trait]
impl ImageInspector for NeverAsked {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        panic!("a probe inspected {}", request.image);
    }
}

#[tokio::test]
async fn a_serving_inspector_answers_the_probe() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(grpc::serve(
        listener,
        None,
        Arc::new(NeverAsked),
        ServiceLimits::default(),
        shutdown.clone(),
    ));
    let remote = RemoteInspector::new(&format!("http://{address}")).unwrap();
    remote.probe(Duration::from_secs(5)).await.unwrap();
    shutdown.cancel();
    served.await.unwrap();
}

#[tokio::test]
async fn an_inspector_without_the_health_service_was_reached() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let served = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(InspectorService::new(Arc::new(NeverAsked)))
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                async move { stop.cancelled().await },
            ),
    );
    let remote = RemoteInspector::new(&format!("http://{address}")).unwrap();
    remote.probe(Duration::from_secs(5)).await.unwrap();
    shutdown.cancel();
    served.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_refused_connection_is_told() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let remote = RemoteInspector::new(&format!("http://{address}")).unwrap();
    let why = remote.probe(Duration::from_secs(5)).await.unwrap_err();
    assert!(
        why.starts_with("cannot reach the image inspector: ") && why.contains("refused"),
        "{why}"
    );
}

#[tokio::test]
async fn a_hung_inspector_is_an_error_at_the_deadline() {
    // Accepts connections and never says a word.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((connection, _)) = listener.accept().await {
            open.push(connection);
        }
    });
    let remote = RemoteInspector::new(&format!("http://{address}")).unwrap();
    let why = remote.probe(Duration::from_millis(300)).await.unwrap_err();
    assert_eq!(why, "the image inspector did not answer within 300ms");
    held.abort();
}
