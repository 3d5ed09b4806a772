//! Registries that do what Debian's docker-registry never does: stream a manifest that
//! never ends, and ask for Bearer tokens (the distribution spec's token auth, as Docker
//! Hub, quay.io and ghcr.io do). Hand-written HTTP servers on 127.0.0.1.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::memory::peak_rss;

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, keyring::Keyring,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn insecure(addr: SocketAddr) -> RegistrySettings {
    let dir = std::env::temp_dir().join(format!(
        "multiarch-hostile-{}-{}",
        std::process::id(),
        addr.port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("registries.yaml");
    std::fs::write(
        &file,
        format!("registries:\n  - registry: \"{addr}\"\n    insecure: true\n"),
    )
    .unwrap();
    let settings = RegistrySettings::load(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    settings
}

fn inspector(addr: SocketAddr, keyring: Keyring, total: Duration) -> Inspector {
    Inspector::new(
        insecure(addr),
        RegistryOptions {
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(2),
            total_timeout: total,
            retry_backoff: Duration::from_millis(20),
            ..RegistryOptions::default()
        },
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(keyring))),
        InspectorMetrics::default(),
    )
}

fn request(image: &str) -> InspectRequest {
    InspectRequest {
        image: image.into(),
        namespace: "ns".into(),
        ..InspectRequest::default()
    }
}

/// The request head (up to the blank line) of the next request on `socket`.
async fn read_head(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
        if head.len() > 64 * 1024 {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Answers every manifest request with a chunked body of up to 1 GiB, as fast as the
/// client reads; counts the bytes it managed to send.
async fn endless_manifest_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                while let Some(head) = read_head(&mut socket).await {
                    if head.starts_with("GET /v2/ ") {
                        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
                        if socket.write_all(ok.as_bytes()).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let start = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nTransfer-Encoding: chunked\r\n\r\n";
                    if socket.write_all(start.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunk = vec![b' '; 64 * 1024];
                    let frame = [
                        format!("{:x}\r\n", chunk.len()).into_bytes(),
                        chunk,
                        b"\r\n".to_vec(),
                    ]
                    .concat();
                    for _ in 0..(1024 * 1024 * 1024 / (64 * 1024)) {
                        if socket.write_all(&frame).await.is_err() {
                            return;
                        }
                        counter.fetch_add(64 * 1024, Ordering::Relaxed);
                    }
                    return;
                }
            });
        }
    });
    (addr, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_that_never_ends_is_cut_at_4_mib_within_the_deadline() {
    let (addr, sent) = endless_manifest_server().await;
    let total = Duration::from_secs(20);
    let inspector = inspector(addr, Keyring::default(), total);
    let started = Instant::now();
    let error = inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert!(started.elapsed() < total, "{:?}", started.elapsed());
    assert!(
        error.to_string().contains("manifest exceeds 4 MiB"),
        "{error}"
    );
    assert!(
        !error.is_transient(),
        "an oversized manifest is not retried"
    );
    // The server could push more into socket buffers, but nowhere near the 1 GiB.
    assert!(
        sent.load(Ordering::Relaxed) < 256 * 1024 * 1024,
        "{} bytes sent",
        sent.load(Ordering::Relaxed)
    );
    assert!(
        peak_rss() < 100 * 1024 * 1024,
        "peak RSS {} MiB",
        peak_rss() / 1024 / 1024
    );
}

/// A registry behind token auth: manifests need `Bearer good-token`, which the token
/// service at `/token` gives for `user:pass` and the repository's pull scope.
async fn token_registry(manifest: &'static str) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tokens = Arc::new(AtomicUsize::new(0));
    let counter = tokens.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                while let Some(head) = read_head(&mut socket).await {
                    let lower = head.to_ascii_lowercase();
                    let (status, extra, body) = if head.starts_with("GET /token?") {
                        counter.fetch_add(1, Ordering::SeqCst);
                        // user:pass, base64
                        let good = lower.contains("authorization: basic dxnlcjpwyxnz")
                            && head.contains("scope=repository%3Aapp%3Apull")
                            && head.contains("service=test-registry");
                        if good {
                            ("200 OK", String::new(), r#"{"token":"good-token"}"#)
                        } else {
                            ("401 Unauthorized", String::new(), "{}")
                        }
                    } else if lower.contains("authorization: bearer good-token") {
                        (
                            "200 OK",
                            "Content-Type: application/vnd.oci.image.index.v1+json\r\n".into(),
                            manifest,
                        )
                    } else {
                        (
                            "401 Unauthorized",
                            format!(
                                "WWW-Authenticate: Bearer realm=\"http://{addr}/token\",service=\"test-registry\",scope=\"repository:app:pull\"\r\n"
                            ),
                            r#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#,
                        )
                    };
                    let response = format!(
                        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, tokens)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_registries_are_answered_and_their_tokens_reused() {
    let index = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[
        {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","size":1,"platform":{"os":"linux","architecture":"arm64"}},
        {"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:2222222222222222222222222222222222222222222222222222222222222222","size":1,"platform":{"os":"linux","architecture":"s390x"}}]}"#;
    let (addr, tokens) = token_registry(index).await;
    let registry = addr.to_string();

    let anonymous = inspector(addr, Keyring::default(), Duration::from_secs(10));
    let error = anonymous
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "unauthorized at {addr}: the pod's pull secrets have no credentials for this registry"
        )
    );

    let mut keyring = Keyring::default();
    keyring
        .add_docker_config_json(
            format!(r#"{{"auths": {{"{registry}": {{"username": "user", "password": "pass"}}}}}}"#)
                .as_bytes(),
        )
        .unwrap();
    let with_secret = inspector(addr, keyring, Duration::from_secs(10));
    let before = tokens.load(Ordering::SeqCst);
    let info = with_secret
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap();
    let platforms: Vec<String> = info
        .platform_list()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(platforms, ["arm64", "s390x"]);
    assert_eq!(tokens.load(Ordering::SeqCst), before + 1);
    // Another tag of the same repository: the token is reused.
    with_secret
        .inspect(&request(&format!("{addr}/app:v2")))
        .await
        .unwrap();
    assert_eq!(tokens.load(Ordering::SeqCst), before + 1);
}

/// Serves fixed manifests by request path (`/v2/app/manifests/REF`), counting the
/// requests for each path; anything else is a 404.
async fn fixed_registry(
    manifests: std::collections::HashMap<String, String>,
) -> (
    SocketAddr,
    Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let counter = requests.clone();
    let manifests = Arc::new(manifests);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (counter, manifests) = (counter.clone(), manifests.clone());
            tokio::spawn(async move {
                while let Some(head) = read_head(&mut socket).await {
                    let path = head
                        .split_whitespace()
                        .nth(1)
                        .unwrap_or_default()
                        .to_owned();
                    *counter.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                    let response = match (path.as_str(), manifests.get(&path)) {
                        ("/v2/", _) => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_owned(),
                        (_, Some(body)) => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        ),
                        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}".to_owned(),
                    };
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, requests)
}

fn sha256(body: &str) -> String {
    use sha2::Digest;
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(body.as_bytes()))
    )
}

fn oci_index(entries: &[String]) -> String {
    format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
        entries.join(",")
    )
}

fn image_entry(digest: &str, arch: &str) -> String {
    format!(
        r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{digest}","size":1,"platform":{{"os":"linux","architecture":"{arch}"}}}}"#
    )
}

fn index_entry(digest: &str) -> String {
    format!(
        r#"{{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"{digest}","size":1}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_listing_too_many_manifests_is_refused_naming_the_limit() {
    // 15,000 entries: 3 MiB of JSON, inside the 4 MiB manifest limit.
    let entry = image_entry(&format!("sha256:{}", "1".repeat(64)), "arm64");
    let huge = oci_index(&vec![entry; 15_000]);
    assert!(huge.len() < 4 * 1024 * 1024);
    let (addr, _) = fixed_registry([("/v2/app/manifests/v1".to_owned(), huge)].into()).await;
    let inspector = inspector(addr, Keyring::default(), Duration::from_secs(10));
    let error = inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("more than 1000 manifests"),
        "{error}"
    );
    assert!(!error.is_transient(), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_indexes_are_fetched_once_each_and_only_so_many() {
    // 200 entries naming one nested index: one fetch of it, its platform listed once.
    let nested = oci_index(&[image_entry(&format!("sha256:{}", "2".repeat(64)), "s390x")]);
    let nested_digest = sha256(&nested);
    let repeated = oci_index(&vec![index_entry(&nested_digest); 200]);
    // 100 distinct nested indexes: refused after the sixteenth, naming the limit.
    let mut manifests: std::collections::HashMap<String, String> = [
        ("/v2/app/manifests/repeated".to_owned(), repeated),
        (format!("/v2/app/manifests/{nested_digest}"), nested),
    ]
    .into();
    let mut fan_out = Vec::new();
    for i in 0..100 {
        let doc = oci_index(&[image_entry(&format!("sha256:{i:064}"), "arm64")]);
        let digest = sha256(&doc);
        fan_out.push(index_entry(&digest));
        manifests.insert(format!("/v2/app/manifests/{digest}"), doc);
    }
    manifests.insert("/v2/app/manifests/fan-out".to_owned(), oci_index(&fan_out));
    let (addr, requests) = fixed_registry(manifests).await;
    let inspector = inspector(addr, Keyring::default(), Duration::from_secs(10));

    let info = inspector
        .inspect(&request(&format!("{addr}/app:repeated")))
        .await
        .unwrap();
    assert_eq!(info.platforms.len(), 1, "{info:?}");
    assert_eq!(info.platforms[0].architecture, "s390x");
    assert_eq!(
        requests.lock().unwrap()[&format!("/v2/app/manifests/{nested_digest}")],
        1
    );

    let error = inspector
        .inspect(&request(&format!("{addr}/app:fan-out")))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("more than 16 nested indexes"),
        "{error}"
    );
    let nested_fetches: usize = requests
        .lock()
        .unwrap()
        .iter()
        .filter(|(path, _)| path.starts_with("/v2/app/manifests/sha256:"))
        .map(|(_, n)| n)
        .sum();
    // The repeated one's single fetch, then sixteen of the fan-out.
    assert_eq!(nested_fetches, 1 + 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_registry_reached_by_two_names_has_one_share_of_the_body_budget() {
    // 3 MiB indexes (under the entry limit only in bytes: refused after they are read,
    // so each holds its body while it streams).
    let entry = image_entry(&format!("sha256:{}", "1".repeat(64)), "arm64");
    let huge = oci_index(&vec![entry; 15_000]);
    let manifests = (0..40)
        .map(|tag| (format!("/v2/app/manifests/t{tag}"), huge.clone()))
        .collect();
    let (addr, _) = fixed_registry(manifests).await;
    let port = addr.port();
    let names = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    std::fs::write(
        &file,
        format!(
            "registries:\n  - registry: \"{}\"\n    insecure: true\n  - registry: \"{}\"\n    insecure: true\n",
            names[0], names[1]
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
    let mut asked = tokio::task::JoinSet::new();
    for tag in 0..40 {
        let inspector = inspector.clone();
        let image = format!("{}/app:t{tag}", names[tag % 2]);
        asked.spawn(async move { inspector.inspect(&request(&image)).await });
    }
    while let Some(answer) = asked.join_next().await {
        assert!(
            answer.unwrap().is_err(),
            "every index is over the entry limit"
        );
    }
    let share = multiarch_inspector::body_budget::REGISTRY_BYTES;
    let held = inspector.body_bytes_peak();
    assert!(
        held <= share + 1024 * 1024,
        "{} MiB of one registry's bodies held at once through two names (a share is {} MiB)",
        held / 1024 / 1024,
        share / 1024 / 1024
    );
    // One body of 3 MiB is counted twice while it is parsed.
    assert!(
        held >= 6 * 1024 * 1024,
        "the bodies were not counted: {held}"
    );
}
