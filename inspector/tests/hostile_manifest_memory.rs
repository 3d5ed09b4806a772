//! Manifests and configs whose lists and maps are many and empty cost the inspector
//! their bytes, not what a parse would make of them: a 4 MiB single manifest of `{}`
//! layers (~1.4 million descriptors if each were kept, ~200 MB per parse), a 4 MiB
//! config of labels, and an index whose entries carry 4 MiB of annotations, two at a
//! time, four times over. This file is its own test binary, so the
//! process's peak RSS is this test's alone.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::memory::peak_rss;

use std::{collections::HashMap, net::SocketAddr, sync::Arc, time::Duration};

use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, keyring::Keyring,
    manifest::MAX_MANIFEST_BYTES, metrics::InspectorMetrics, registry::RegistryOptions,
    secrets::StaticKeyring, settings::RegistrySettings,
};
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The bound for the whole test process. Measured with the bounded parse: 44–45 MiB
/// (20 MiB before the first inspection: the served bodies); with the descriptors,
/// labels and annotations kept: 245–248 MiB.
const PEAK_RSS_BOUND: u64 = 80 * 1024 * 1024;

fn digest(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(body)))
}

/// `{prefix}{item}{item}...{suffix}`, just under the manifest limit.
fn filled(prefix: &str, item: &str, separator: &str, suffix: &str) -> Vec<u8> {
    let room = MAX_MANIFEST_BYTES - prefix.len() - suffix.len() - 64;
    let count = room / (item.len() + separator.len());
    let mut body = String::with_capacity(MAX_MANIFEST_BYTES);
    body.push_str(prefix);
    for i in 0..count {
        if i > 0 {
            body.push_str(separator);
        }
        body.push_str(item);
    }
    body.push_str(suffix);
    body.into_bytes()
}

/// Serves `blobs` and `manifests` by path; anything else is a 404.
async fn serving(paths: HashMap<String, Arc<Vec<u8>>>) -> SocketAddr {
    let paths = Arc::new(paths);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let paths = paths.clone();
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
                    let path = head.split_whitespace().nth(1).unwrap_or_default();
                    let body = match path {
                        "/v2/" => Some(Arc::new(b"{}".to_vec())),
                        _ => paths.get(path).cloned(),
                    };
                    let written = match body {
                        Some(body) => {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                                body.len()
                            );
                            socket.write_all(head.as_bytes()).await.is_ok()
                                && socket.write_all(&body).await.is_ok()
                        }
                        None => socket
                            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                            .await
                            .is_ok(),
                    };
                    if !written {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// The bodies served: a config of ~190,000 labels, a manifest of ~1.4 million empty
/// layers (four tags), an index whose annotations are ~4 MiB of short pairs (four tags),
/// each near the manifest bound and held once.
fn hostile_bodies() -> HashMap<String, Arc<Vec<u8>>> {
    // An image whose config holds ~190,000 labels (one of them an OLM bundle's would
    // still be seen) and whose manifest lists ~1.4 million `{}` layers.
    let config = filled(
        r#"{"architecture":"arm64","os":"linux","config":{"Labels":{"#,
        r#""k":"v""#,
        ",",
        "}}}",
    );
    let config_digest = digest(&config);
    let layers = filled(
        &format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config_digest}","size":1}},"layers":["#
        ),
        "{}",
        ",",
        "]}",
    );
    // An index of two entries, the first's annotations ~4 MiB of short pairs.
    let annotated = filled(
        &format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{}","size":1,"platform":{{"os":"linux","architecture":"s390x"}},"annotations":{{"#,
            digest(b"a")
        ),
        r#""a":"b""#,
        ",",
        &format!(
            r#"}}}},{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{}","size":1,"platform":{{"os":"linux","architecture":"ppc64le"}}}}]}}"#,
            digest(b"b")
        ),
    );
    for body in [&config, &layers, &annotated] {
        assert!(body.len() > MAX_MANIFEST_BYTES - 1024 && body.len() <= MAX_MANIFEST_BYTES);
    }
    // One copy of each body, served under every tag.
    let (config, layers, annotated) = (Arc::new(config), Arc::new(layers), Arc::new(annotated));
    let mut paths = HashMap::new();
    paths.insert(format!("/v2/app/blobs/{config_digest}"), config);
    for tag in 0..4 {
        paths.insert(format!("/v2/app/manifests/layers{tag}"), layers.clone());
        paths.insert(
            format!("/v2/app/manifests/annotated{tag}"),
            annotated.clone(),
        );
    }
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_layers_labels_and_annotations_cost_their_bytes_not_a_parse_of_them() {
    let registry = serving(hostile_bodies()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    std::fs::write(
        &file,
        format!("registries:\n  - registry: \"{registry}\"\n    insecure: true\n"),
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

    // Two at a time: a parsed manifest holds twice its bytes of the registry's 24 MiB
    // share, the config read beside it once more.
    for tag in 0..4 {
        let mut inspections = tokio::task::JoinSet::new();
        for image in [format!("layers{tag}"), format!("annotated{tag}")] {
            let inspector = inspector.clone();
            let image = format!("{registry}/app:{image}");
            inspections.spawn(async move {
                let answer = inspector
                    .inspect(&InspectRequest {
                        image: image.clone(),
                        namespace: "tenant".into(),
                        ..InspectRequest::default()
                    })
                    .await;
                (image, answer)
            });
        }
        while let Some(joined) = inspections.join_next().await {
            let (image, answer) = joined.unwrap();
            let answer = answer.unwrap_or_else(|e| panic!("{image}: {e}"));
            let mut platforms: Vec<String> = answer
                .platform_list()
                .iter()
                .map(ToString::to_string)
                .collect();
            platforms.sort();
            let expected: &[&str] = if image.contains("layers") {
                &["arm64"]
            } else {
                &["ppc64le", "s390x"]
            };
            assert_eq!(platforms, expected, "{image}");
        }
    }
    let peak = peak_rss();
    println!(
        "4 MiB manifests of empty layers, labels and annotations, two at a time: peak RSS {} MiB (before: {} MiB), bodies and parses held at once {} MiB",
        peak / 1024 / 1024,
        before / 1024 / 1024,
        inspector.body_bytes_peak() / 1024 / 1024
    );
    assert!(
        peak < PEAK_RSS_BOUND,
        "peak RSS {} MiB over the {} MiB bound",
        peak / 1024 / 1024,
        PEAK_RSS_BOUND / 1024 / 1024
    );
}
