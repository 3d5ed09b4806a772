//! A hostile registry costs the inspector a bounded amount of memory, whatever it sends
//! and however many pods name it at once, and only its own images fail: fifty pods name
//! fifty tags of a registry whose every tag is a 3 MiB index of 18,000 entries, while a
//! healthy registry's image is asked for and answered. This file is its own test binary,
//! so the process's peak RSS is this test's alone.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{net::SocketAddr, sync::Arc, time::Duration};

use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, keyring::Keyring,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The bound README states for this vector, for the whole test process. Measured:
/// 85–121 MiB with the body budget, 143–185 MiB without it; the allocator makes it vary,
/// so the budget's own high-water mark is asserted exactly below.
const PEAK_RSS_BOUND: u64 = 160 * 1024 * 1024;

fn entry(architecture: &str) -> String {
    format!(
        r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{}","size":1,"platform":{{"os":"linux","architecture":"{architecture}"}}}}"#,
        "1".repeat(64)
    )
}

fn index(entries: &[String]) -> Vec<u8> {
    format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
        entries.join(",")
    )
    .into_bytes()
}

/// Answers every manifest request with `body` (one shared copy, written straight from
/// it: the server adds no memory per request).
async fn serving(body: Vec<u8>) -> SocketAddr {
    let body = Arc::new(body);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                loop {
                    head.clear();
                    while !head.ends_with(b"\r\n\r\n") {
                        if socket.read(&mut byte).await.ok() != Some(1) {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let api_check = head.starts_with(b"GET /v2/ ");
                    let payload: &[u8] = if api_check { b"{}" } else { &body };
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\n\r\n",
                        payload.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err()
                        || socket.write_all(payload).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_huge_indexes_at_once_stay_under_the_bound_while_a_healthy_image_is_answered() {
    let huge = index(&vec![entry("arm64"); 18_000]);
    assert!(huge.len() > 3 * 1024 * 1024 && huge.len() < 4 * 1024 * 1024);
    let hostile = serving(huge).await;
    let healthy = serving(index(&[entry("amd64"), entry("arm64")])).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    std::fs::write(
        &file,
        format!(
            "registries:\n  - registry: \"{hostile}\"\n    insecure: true\n  - registry: \"{healthy}\"\n    insecure: true\n"
        ),
    )
    .unwrap();
    let inspector = Arc::new(Inspector::new(
        RegistrySettings::load(&file).unwrap(),
        RegistryOptions {
            retry_backoff: Duration::from_millis(20),
            ..RegistryOptions::default()
        },
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(Keyring::default()))),
        InspectorMetrics::default(),
    ));
    let before = peak_rss();

    let mut attacks = tokio::task::JoinSet::new();
    for tag in 0..50 {
        let inspector = inspector.clone();
        attacks.spawn(async move {
            inspector
                .inspect(&InspectRequest {
                    image: format!("{hostile}/app:t{tag}"),
                    namespace: "tenant".into(),
                    ..InspectRequest::default()
                })
                .await
        });
    }
    let answer = inspector
        .inspect(&InspectRequest {
            image: format!("{healthy}/web:1"),
            namespace: "shop".into(),
            ..InspectRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(answer.platform_list().len(), 2);

    let mut refusals = std::collections::BTreeMap::new();
    while let Some(result) = attacks.join_next().await {
        let error = result.unwrap().unwrap_err();
        *refusals.entry(error.metric_label()).or_insert(0) += 1;
    }
    let peak = peak_rss();
    // What the inspector itself held of bodies at once: one registry's share at most.
    let held = inspector.body_bytes_peak();
    assert!(
        held <= multiarch_inspector::body_budget::REGISTRY_BYTES,
        "{held} bytes of bodies held at once"
    );
    assert!(
        held > 3 * 1024 * 1024,
        "the bodies were not counted: {held}"
    );
    println!(
        "50 huge indexes at once: peak RSS {} MiB (before: {} MiB), bodies held at once {} MiB; the hostile images failed with {refusals:?}",
        peak / 1024 / 1024,
        before / 1024 / 1024,
        held / 1024 / 1024
    );
    assert!(
        peak < PEAK_RSS_BOUND,
        "peak RSS {} MiB over the {} MiB bound",
        peak / 1024 / 1024,
        PEAK_RSS_BOUND / 1024 / 1024
    );
}
