//! Hostile registries cost the inspector a bounded amount of memory, whatever they send
//! and however many pods name them at once, and only their own images fail: at once,
//! fifty pods name fifty tags of a registry whose every tag is a 3 MiB index of 18,000
//! entries, a pod names an index that fans out to 100 nested indexes, and a pod names a
//! registry that redirects to the cloud metadata address, while a healthy registry's
//! image is asked for and answered. This file is its own test binary, so the process's
//! peak RSS is this test's alone.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::memory::peak_rss;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, keyring::Keyring,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The bound docs/security.md states for this vector, for the whole test process. Measured:
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

/// What a test registry answers for a path.
enum Reply {
    Body(Arc<Vec<u8>>),
    Redirect(String),
}

/// Answers every manifest request with `body` (one shared copy, written straight from
/// it: the server adds no memory per request).
async fn serving(body: Vec<u8>) -> SocketAddr {
    let body = Arc::new(body);
    routed(move |_| Reply::Body(body.clone())).await
}

/// Answers each request as `reply` says for its path (`/v2/` is always 200).
async fn routed(reply: impl Fn(&str) -> Reply + Send + Sync + 'static) -> SocketAddr {
    let reply = Arc::new(reply);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let reply = reply.clone();
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
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let path = head
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or_default()
                        .to_owned();
                    let reply = if path == "/v2/" {
                        Reply::Body(Arc::new(b"{}".to_vec()))
                    } else {
                        reply(&path)
                    };
                    let (response, body) = match reply {
                        Reply::Body(body) => (
                            format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\n\r\n",
                                body.len()
                            ),
                            body,
                        ),
                        Reply::Redirect(to) => (
                            format!(
                                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n"
                            ),
                            Arc::new(Vec::new()),
                        ),
                    };
                    let payload: &[u8] = &body;
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

/// An inspector of `registries` (insecure: plain HTTP), and the directory of its
/// settings.
fn inspector_of(registries: &[SocketAddr]) -> (tempfile::TempDir, Arc<Inspector>) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    let mut yaml = String::from("registries:\n");
    for registry in registries {
        yaml.push_str(&format!(
            "  - registry: \"{registry}\"\n    insecure: true\n"
        ));
    }
    std::fs::write(&file, yaml).unwrap();
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
    (dir, inspector)
}

/// A registry serving an index of 100 nested indexes, each of one platform (16 are
/// fetched, then refused).
async fn nesting_registry() -> SocketAddr {
    let mut nested = std::collections::HashMap::new();
    let mut fan_out = Vec::new();
    for i in 0..100 {
        let doc = index(&[entry(&format!("arch{i}"))]);
        let digest = format!(
            "sha256:{}",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&doc))
        );
        fan_out.push(format!(
            r#"{{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"{digest}","size":{}}}"#,
            doc.len()
        ));
        nested.insert(format!("/v2/app/manifests/{digest}"), Arc::new(doc));
    }
    let fan_out = Arc::new(index(&fan_out));
    routed(move |path| Reply::Body(nested.get(path).cloned().unwrap_or_else(|| fan_out.clone())))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_huge_indexes_at_once_stay_under_the_bound_while_a_healthy_image_is_answered() {
    let huge = index(&vec![entry("arm64"); 18_000]);
    assert!(huge.len() > 3 * 1024 * 1024 && huge.len() < 4 * 1024 * 1024);
    let hostile = serving(huge).await;
    let healthy = serving(index(&[entry("amd64"), entry("arm64")])).await;
    let nesting = nesting_registry().await;
    let redirecting =
        routed(|_| Reply::Redirect("http://169.254.169.254/latest/meta-data/".into())).await;
    let (_dir, inspector) = inspector_of(&[hostile, healthy, nesting, redirecting]);
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
    let mut others = tokio::task::JoinSet::new();
    for image in [
        format!("{nesting}/app:fan-out"),
        format!("{redirecting}/app:1"),
    ] {
        let inspector = inspector.clone();
        others.spawn(async move {
            inspector
                .inspect(&InspectRequest {
                    image,
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

    let mut why = Vec::new();
    while let Some(result) = others.join_next().await {
        why.push(result.unwrap().unwrap_err().to_string());
    }
    why.sort();
    assert!(why[0].contains("more than 16 nested indexes"), "{why:?}");
    assert!(
        why[1].contains(
            "http://169.254.169.254/latest/meta-data/ refused: it is an internal address"
        ),
        "{why:?}"
    );
    let mut refusals = std::collections::BTreeMap::new();
    while let Some(result) = attacks.join_next().await {
        let error = result.unwrap().unwrap_err();
        *refusals.entry(error.metric_label()).or_insert(0) += 1;
    }
    let peak = peak_rss();
    // What the inspector itself held of bodies at once: the huge indexes' registry's
    // share at most, and the other registries' few KiB.
    let held = inspector.body_bytes_peak();
    assert!(
        held <= multiarch_inspector::body_budget::REGISTRY_BYTES + 1024 * 1024,
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
