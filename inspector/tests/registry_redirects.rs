//! A registry that redirects the inspector: to the cloud metadata address, to a loopback
//! port under another name, along an endless chain. Each is refused with a message that
//! says why and how to allow it, before any connection to the target; the registry's
//! own host, and targets a registry is configured to reach (`allowInternalRedirects`),
//! are followed. Hand-written HTTP servers on 127.0.0.1; nothing else is contacted.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, keyring::Keyring,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const INDEX: &str = r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":10,"platform":{"os":"linux","architecture":"arm64"}}]}"#;

/// What a server answers for a path.
#[derive(Clone)]
enum Answer {
    Redirect(String),
    Index,
    /// 401 with a Bearer challenge naming this token service.
    Challenge(String),
}

type Requests = Arc<Mutex<Vec<String>>>;

/// A plain-HTTP server on 127.0.0.1 answering `/v2/` with 200 and each path as `answers`
/// says (404 otherwise), recording the paths asked for.
async fn server(answers: HashMap<String, Answer>) -> (SocketAddr, Requests) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests: Requests = Arc::default();
    let recorded = requests.clone();
    let answers = Arc::new(answers);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (recorded, answers) = (recorded.clone(), answers.clone());
            tokio::spawn(async move {
                while let Some(path) = read_path(&mut socket).await {
                    recorded.lock().unwrap().push(path.clone());
                    let response = match (path.as_str(), answers.get(&path)) {
                        ("/v2/", _) => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}".to_owned(),
                        (_, Some(Answer::Redirect(to))) => format!(
                            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n"
                        ),
                        (_, Some(Answer::Challenge(realm))) => format!(
                            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"{realm}\",service=\"registry\"\r\nContent-Length: 2\r\n\r\n{{}}"
                        ),
                        (_, Some(Answer::Index)) => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\n\r\n{INDEX}",
                            INDEX.len()
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

async fn read_path(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if socket.read(&mut byte).await.ok()? == 0 || head.len() > 64 * 1024 {
            return None;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    head.split_whitespace().nth(1).map(str::to_owned)
}

const MANIFEST: &str = "/v2/app/manifests/v1";

fn inspector(settings_yaml: &str) -> Inspector {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    std::fs::write(&file, settings_yaml).unwrap();
    Inspector::new(
        RegistrySettings::load(&file).unwrap(),
        RegistryOptions {
            connect_timeout: Duration::from_secs(2),
            read_timeout: Duration::from_secs(2),
            total_timeout: Duration::from_secs(20),
            retry_backoff: Duration::from_millis(20),
            ..RegistryOptions::default()
        },
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(Keyring::default()))),
        InspectorMetrics::default(),
    )
}

fn insecure(addr: SocketAddr, allow_internal: bool) -> String {
    format!(
        "registries:\n  - registry: \"{addr}\"\n    insecure: true\n    allowInternalRedirects: {allow_internal}\n"
    )
}

fn request(addr: SocketAddr) -> InspectRequest {
    InspectRequest {
        image: format!("{addr}/app:v1"),
        namespace: "tenant".into(),
        ..InspectRequest::default()
    }
}

/// A registry redirecting its manifest to `to`.
async fn redirecting_to(to: &str) -> SocketAddr {
    server(HashMap::from([(
        MANIFEST.to_owned(),
        Answer::Redirect(to.to_owned()),
    )]))
    .await
    .0
}

#[tokio::test]
async fn a_redirect_to_the_metadata_address_is_refused_with_the_reason() {
    let registry = redirecting_to("http://169.254.169.254/latest/meta-data/iam/").await;
    let err = inspector(&insecure(registry, false))
        .inspect(&request(registry))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "http://169.254.169.254/latest/meta-data/iam/ refused: it is an internal address; the registry {registry} may send the inspector only to public addresses, over at most 5 redirects (set allowInternalRedirects for it in the registry settings to allow internal ones)"
        )),
        "{message}"
    );
    assert!(!err.is_transient(), "a refusal is not retried: {err:?}");
}

#[tokio::test]
async fn a_loopback_target_under_another_name_is_refused_unless_allowed() {
    let (target, target_requests) =
        server(HashMap::from([(MANIFEST.to_owned(), Answer::Index)])).await;
    let location = format!("http://localhost:{}{MANIFEST}", target.port());
    let registry = redirecting_to(&location).await;

    let err = inspector(&insecure(registry, false))
        .inspect(&request(registry))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&format!("{location} refused")),
        "{err}"
    );
    assert!(
        target_requests.lock().unwrap().is_empty(),
        "the refused target was contacted"
    );

    // The registry is configured to reach internal addresses: followed.
    let info = inspector(&insecure(registry, true))
        .inspect(&request(registry))
        .await
        .unwrap();
    assert_eq!(info.platform_list()[0].to_string(), "arm64");
    assert_eq!(*target_requests.lock().unwrap(), [MANIFEST]);
}

/// The registry's own host is reachable anyway (a pod can name any of its ports), so a
/// redirect there is followed.
#[tokio::test]
async fn a_redirect_to_the_registrys_own_host_is_followed() {
    let (target, _) = server(HashMap::from([(MANIFEST.to_owned(), Answer::Index)])).await;
    let registry = redirecting_to(&format!("http://127.0.0.1:{}{MANIFEST}", target.port())).await;
    let info = inspector(&insecure(registry, false))
        .inspect(&request(registry))
        .await
        .unwrap();
    assert_eq!(info.platform_list()[0].to_string(), "arm64");
}

#[tokio::test]
async fn an_endless_redirect_chain_stops_at_the_hop_limit() {
    // Each hop to the next path on the same server, fifty times.
    let answers: HashMap<String, Answer> = (0..50)
        .map(|i| {
            let from = if i == 0 {
                MANIFEST.to_owned()
            } else {
                format!("/hop/{i}")
            };
            (from, Answer::Redirect(format!("/hop/{}", i + 1)))
        })
        .collect();
    let (registry, requests) = server(answers).await;
    let err = inspector(&insecure(registry, false))
        .inspect(&request(registry))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("refused: the registry redirected more than 5 times"),
        "{err}"
    );
    let hops = requests
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.starts_with("/hop/"))
        .count();
    assert!(!err.is_transient(), "{err:?}");
    assert_eq!(hops, 5, "one attempt, five hops followed");
}

/// The token service a registry names is a target it chose too.
#[tokio::test]
async fn a_token_service_at_an_internal_address_is_refused() {
    let realm = "http://169.254.169.254/token";
    let (registry, _) = server(HashMap::from([(
        MANIFEST.to_owned(),
        Answer::Challenge(realm.to_owned()),
    )]))
    .await;
    let err = inspector(&insecure(registry, false))
        .inspect(&request(registry))
        .await
        .unwrap_err();
    assert_eq!(err.metric_label(), "refused", "{err:?}");
    assert!(
        err.to_string().contains(&format!(
            "its token service {realm} refused: it is an internal address"
        )),
        "{err}"
    );
}
