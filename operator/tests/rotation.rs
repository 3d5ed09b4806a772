//! Certificate rotation under traffic: a webhook pod serving the Secret the operator
//! writes (as the kubelet projects it: files swapped atomically behind `..data`, reloaded
//! by the server), and a client that calls it the way the API server does (verifying
//! against the MutatingWebhookConfiguration's caBundle as it is at each call). Not one
//! call may fail while the serving certificate, or the CA itself, is replaced.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use base64::{Engine, engine::general_purpose::STANDARD};
use common::*;
use k8s_openapi::api::core::v1::Secret;
use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault, Method};
use multiarch_operator::{
    certificates::{
        Authority, BUNDLE_KEY, CA_KEY, CA_LIFETIME_SECONDS, CERT_KEY, PRIVATE_KEY_KEY,
        SERVING_LIFETIME_SECONDS, SecretData, authority::secret_data, ensure_authority, expires_at,
        issue_serving,
    },
    install::{CA_SECRET, OPERATOR_TLS_SECRET, WEBHOOK_TLS_SECRET, webhook_dns_names},
};
use serde_json::{Value, json};

fn secret(server: &FakeApiServer, name: &str) -> SecretData {
    let value = get(server, "secrets", name).unwrap_or_else(|| panic!("no Secret {name}"));
    secret_data(&serde_json::from_value::<Secret>(value).unwrap())
}

/// Replaces the data of Secret `name`, keeping its labels (the operator's watch sees it).
fn write_secret(server: &FakeApiServer, name: &str, data: &SecretData) {
    let mut value = get(server, "secrets", name).unwrap();
    value["data"] = data
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(STANDARD.encode(v))))
        .collect::<serde_json::Map<_, _>>()
        .into();
    server.apply("secrets", value);
}

fn ca_bundle(server: &FakeApiServer) -> Vec<u8> {
    let mwc = get(server, MWC, "multiarch-webhook").unwrap();
    STANDARD
        .decode(
            mwc["webhooks"][0]["clientConfig"]["caBundle"]
                .as_str()
                .unwrap(),
        )
        .unwrap()
}

fn set_ca_bundle(server: &FakeApiServer, bundle_pem: &str) {
    let mut mwc = get(server, MWC, "multiarch-webhook").unwrap();
    for hook in mwc["webhooks"].as_array_mut().unwrap() {
        hook["clientConfig"]["caBundle"] = json!(STANDARD.encode(bundle_pem));
    }
    server.apply(MWC, mwc);
}

fn certificates_in(pem: &[u8]) -> usize {
    String::from_utf8_lossy(pem)
        .matches("-----BEGIN CERTIFICATE-----")
        .count()
}

fn der_of(cert_pem: &[u8]) -> Vec<u8> {
    ::pem::parse(cert_pem).unwrap().contents().to_vec()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The kubelet's projection of Secret `name` into `dir`: `tls.crt` and `tls.key` are
/// links through `..data`, which is swapped in one rename, so a reader never sees a new
/// certificate with an old key.
fn project(
    server: Arc<FakeApiServer>,
    name: &'static str,
    dir: PathBuf,
) -> tokio::task::JoinHandle<()> {
    for file in [CERT_KEY, PRIVATE_KEY_KEY] {
        std::os::unix::fs::symlink(Path::new("..data").join(file), dir.join(file)).unwrap();
    }
    tokio::spawn(async move {
        let mut written: Option<SecretData> = None;
        for generation in 0u64.. {
            let data = secret(&server, name);
            if written.as_ref() != Some(&data) {
                let version = dir.join(format!("..{generation}"));
                std::fs::create_dir(&version).unwrap();
                for file in [CERT_KEY, PRIVATE_KEY_KEY] {
                    std::fs::write(version.join(file), &data[file]).unwrap();
                }
                let link = dir.join("..data_tmp");
                std::os::unix::fs::symlink(&version, &link).unwrap();
                std::fs::rename(&link, dir.join("..data")).unwrap();
                written = Some(data);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// The webhook pod: HTTPS from the projected files, reloaded as they change.
async fn webhook_pod(dir: &Path) -> std::net::SocketAddr {
    eventually("the Secret projected", || dir.join(CERT_KEY).exists()).await;
    let tls = multiarch_runtime::serving_cert::server_config(
        dir.join(CERT_KEY),
        dir.join(PRIVATE_KEY_KEY),
        Duration::from_millis(50),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route("/mutate-pods", axum::routing::post(|| async { "{}" }));
    tokio::spawn(multiarch_runtime::https_server::serve(
        listener,
        tls,
        app,
        tokio_util::sync::CancellationToken::new(),
        multiarch_runtime::server_limits::ServerLimits::default(),
    ));
    addr
}

/// One admission call as the API server makes it: trusting the caBundle configured now.
async fn call(server: &FakeApiServer, addr: std::net::SocketAddr) -> Result<Vec<u8>, String> {
    let name = webhook_dns_names(&settings())[0].clone();
    let (status, _, leaf) = https::request(
        addr,
        &ca_bundle(server),
        &name,
        "POST",
        "/mutate-pods",
        b"{}",
    )
    .await?;
    if status != 200 {
        return Err(format!("HTTP {status}"));
    }
    Ok(leaf)
}

/// Calls the webhook back to back until stopped, counting failures and the leaves seen.
struct Traffic {
    calls: Arc<AtomicU64>,
    failures: Arc<Mutex<Vec<String>>>,
    leaves: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Traffic {
    fn start(server: Arc<FakeApiServer>, addr: std::net::SocketAddr) -> Traffic {
        let calls = Arc::new(AtomicU64::new(0));
        let failures: Arc<Mutex<Vec<String>>> = Arc::default();
        let leaves: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (calls, failures, leaves, stop) = (
                calls.clone(),
                failures.clone(),
                leaves.clone(),
                stop.clone(),
            );
            async move {
                while !stop.load(Ordering::SeqCst) {
                    match call(&server, addr).await {
                        Ok(leaf) => {
                            let mut seen = leaves.lock().unwrap();
                            if seen.last() != Some(&leaf) {
                                seen.push(leaf);
                            }
                        }
                        Err(e) => failures.lock().unwrap().push(e),
                    }
                    calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        });
        Traffic {
            calls,
            failures,
            leaves,
            stop,
            task,
        }
    }

    fn serving(&self, leaf: &[u8]) -> bool {
        self.leaves.lock().unwrap().last().map(Vec::as_slice) == Some(leaf)
    }

    /// Stops after `more` further calls; the failures and every leaf served, in order.
    async fn finish(self, more: u64) -> (u64, Vec<String>, Vec<Vec<u8>>) {
        let target = self.calls.load(Ordering::SeqCst) + more;
        eventually("more calls", || self.calls.load(Ordering::SeqCst) >= target).await;
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        let failures = self.failures.lock().unwrap().clone();
        let leaves = self.leaves.lock().unwrap().clone();
        (self.calls.load(Ordering::SeqCst), failures, leaves)
    }
}

/// An installed cluster with the webhook pod serving what the operator wrote, and the
/// operator stopped (so the test can age the certificates before it comes back).
async fn serving_cluster() -> (
    Arc<FakeApiServer>,
    Rollouts,
    std::net::SocketAddr,
    tempfile::TempDir,
) {
    let server = Arc::new(cluster().await);
    let (rollouts, operator) = installed(&server, json!({}), Duration::from_secs(30)).await;
    eventually("the webhook's certificate", || {
        get(&server, "secrets", WEBHOOK_TLS_SECRET).is_some()
    })
    .await;
    operator.stop().await;
    let dir = tempfile::tempdir().unwrap();
    project(server.clone(), WEBHOOK_TLS_SECRET, dir.path().to_owned());
    let addr = webhook_pod(dir.path()).await;
    (server, rollouts, addr, dir)
}

/// Waits until the pod serves `cert_pem` and a call trusting the caBundle succeeds.
async fn until_served(server: &Arc<FakeApiServer>, addr: std::net::SocketAddr, cert_pem: &[u8]) {
    let want = der_of(cert_pem);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let last = call(server, addr).await;
        if last.as_ref().is_ok_and(|leaf| *leaf == want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "certificate never served; last call: {:?}",
            last.map(|leaf| if leaf == want {
                "the wanted leaf"
            } else {
                "another leaf"
            })
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serving_certificate_near_expiry_is_replaced_without_a_failed_call() {
    let (server, _rollouts, addr, _dir) = serving_cluster().await;
    let authority = Authority::from_secret_data(&secret(&server, CA_SECRET)).unwrap();
    let bundle_before = ca_bundle(&server);
    // The certificate as it was issued a year less a minute ago: one minute left.
    let issued = SystemTime::now() - Duration::from_secs(SERVING_LIFETIME_SECONDS as u64 - 60);
    let names = webhook_dns_names(&settings());
    let old = issue_serving(&authority, &names, issued).unwrap();
    write_secret(&server, WEBHOOK_TLS_SECRET, &old);
    until_served(&server, addr, &old[CERT_KEY]).await;

    let traffic = Traffic::start(server.clone(), addr);
    let operator = start_operator(&server, Duration::from_secs(30)).await;
    eventually("a new certificate in the Secret", || {
        expires_at(&secret(&server, WEBHOOK_TLS_SECRET))
            .is_some_and(|at| at > unix_now() + SERVING_LIFETIME_SECONDS - 3600)
    })
    .await;
    let new = secret(&server, WEBHOOK_TLS_SECRET);
    let new_leaf = der_of(&new[CERT_KEY]);
    eventually("the new certificate served", || traffic.serving(&new_leaf)).await;
    let (calls, failures, leaves) = traffic.finish(20).await;
    operator.stop().await;

    assert_eq!(failures, Vec::<String>::new(), "{calls} calls");
    assert_eq!(
        leaves,
        vec![der_of(&old[CERT_KEY]), new_leaf],
        "served in turn"
    );
    // Same CA: the API server's trust did not have to change.
    assert_eq!(ca_bundle(&server), bundle_before);
    assert_eq!(new[CA_KEY], bundle_before);
    assert_ne!(new[PRIVATE_KEY_KEY], old[PRIVATE_KEY_KEY], "a new key too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_near_expiry_is_replaced_while_the_old_one_stays_trusted() {
    let (server, _rollouts, addr, _dir) = serving_cluster().await;
    // The world as the operator left it almost five years ago: a CA with two minutes
    // left, the webhook's certificate signed by it, the API server trusting only it.
    let created = SystemTime::now() - Duration::from_secs(CA_LIFETIME_SECONDS as u64 - 120);
    let (old_ca, _) = ensure_authority(None, created).unwrap();
    let names = webhook_dns_names(&settings());
    let old_serving = issue_serving(&old_ca, &names, SystemTime::now()).unwrap();
    write_secret(&server, CA_SECRET, &old_ca.to_secret_data());
    set_ca_bundle(&server, &old_ca.bundle_pem);
    write_secret(&server, WEBHOOK_TLS_SECRET, &old_serving);
    until_served(&server, addr, &old_serving[CERT_KEY]).await;
    assert_eq!(certificates_in(&ca_bundle(&server)), 1);

    let traffic = Traffic::start(server.clone(), addr);
    let operator = start_operator(&server, Duration::from_secs(30)).await;
    eventually("a new CA", || {
        secret(&server, CA_SECRET)[CERT_KEY] != old_ca.cert_pem.as_bytes()
    })
    .await;
    let new_ca = Authority::from_secret_data(&secret(&server, CA_SECRET)).unwrap();
    eventually("the webhook's certificate signed by the new CA", || {
        secret(&server, WEBHOOK_TLS_SECRET)[CA_KEY] == new_ca.bundle_pem.as_bytes()
            && secret(&server, WEBHOOK_TLS_SECRET)[CERT_KEY] != old_serving[CERT_KEY]
    })
    .await;
    let new_serving = secret(&server, WEBHOOK_TLS_SECRET);
    let new_leaf = der_of(&new_serving[CERT_KEY]);
    eventually("the new certificate served", || traffic.serving(&new_leaf)).await;
    let (calls, failures, leaves) = traffic.finish(20).await;
    operator.stop().await;

    assert_eq!(failures, Vec::<String>::new(), "{calls} calls");
    assert_eq!(leaves, vec![der_of(&old_serving[CERT_KEY]), new_leaf]);
    // Both CAs are trusted, the new one first, until the old one expires; the operator's
    // own webhooks (conversion, validation) were given the same bundle.
    assert_eq!(certificates_in(new_ca.bundle_pem.as_bytes()), 2);
    assert!(new_ca.bundle_pem.contains(old_ca.cert_pem.trim()));
    assert!(new_ca.bundle_pem.starts_with(new_ca.cert_pem.trim()));
    assert_eq!(ca_bundle(&server), new_ca.bundle_pem.as_bytes());
    assert_eq!(
        secret(&server, CA_SECRET)[BUNDLE_KEY],
        new_ca.bundle_pem.as_bytes()
    );
    let crd = server
        .get(
            "apiextensions.k8s.io/customresourcedefinitions",
            "",
            "clusterpodplacementconfigs.multiarch.openshift.io",
        )
        .unwrap();
    let injected = crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap();
    assert_eq!(
        STANDARD.decode(injected).unwrap(),
        new_ca.bundle_pem.as_bytes()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_is_renewed_while_every_reconcile_fails() {
    let (server, _rollouts, addr, _dir) = serving_cluster().await;
    let authority = Authority::from_secret_data(&secret(&server, CA_SECRET)).unwrap();
    let issued = SystemTime::now() - Duration::from_secs(SERVING_LIFETIME_SECONDS as u64 - 60);
    let old = issue_serving(&authority, &webhook_dns_names(&settings()), issued).unwrap();
    write_secret(&server, WEBHOOK_TLS_SECRET, &old);
    until_served(&server, addr, &old[CERT_KEY]).await;
    // Every reconcile fails before it writes an operand: the operands cannot be read.
    server.inject(Fault::new(
        Some(Method::GET),
        "/apis/apps/v1/namespaces/multiarch/deployments",
        Effect::Status(500),
    ));
    let operator = start_operator(&server, Duration::from_secs(30)).await;
    eventually("a new certificate in the Secret", || {
        expires_at(&secret(&server, WEBHOOK_TLS_SECRET))
            .is_some_and(|at| at > unix_now() + SERVING_LIFETIME_SECONDS - 3600)
    })
    .await;
    let new_leaf = der_of(&secret(&server, WEBHOOK_TLS_SECRET)[CERT_KEY]);
    until_served(
        &server,
        addr,
        &secret(&server, WEBHOOK_TLS_SECRET)[CERT_KEY],
    )
    .await;
    assert_ne!(new_leaf, der_of(&old[CERT_KEY]));
    assert!(operator.passes() == 0, "no reconcile succeeded meanwhile");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_serves_a_certificate_from_a_new_ca_only_once_the_api_server_has_the_ca() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(30)).await;
    operator.stop().await;
    // A CA with two minutes left, the operator's certificate signed by it.
    let created = SystemTime::now() - Duration::from_secs(CA_LIFETIME_SECONDS as u64 - 120);
    let (old_ca, _) = ensure_authority(None, created).unwrap();
    let own_names = multiarch_operator::install::operator_dns_names(&settings());
    let own = issue_serving(&old_ca, &own_names, SystemTime::now()).unwrap();
    write_secret(&server, CA_SECRET, &old_ca.to_secret_data());
    write_secret(&server, OPERATOR_TLS_SECRET, &own);
    // The API server refuses the CRD's new bundle for now.
    let crd_patch = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterpodplacementconfigs.multiarch.openshift.io";
    // (Whichever way the bundle is written: a patch, or an update of the whole object.)
    for method in [Method::PATCH, Method::PUT] {
        server.inject(Fault::new(Some(method), crd_patch, Effect::Status(500)));
    }
    let operator = start_operator(&server, Duration::from_secs(30)).await;
    let attempts = || {
        server
            .requests()
            .iter()
            .filter(|r| {
                r.starts_with(&format!("PATCH {crd_patch}"))
                    || r.starts_with(&format!("PUT {crd_patch}"))
            })
            .count()
    };
    eventually("two certificate checks failing to inject", || {
        attempts() >= 2
    })
    .await;
    assert_ne!(
        secret(&server, CA_SECRET)[CERT_KEY],
        old_ca.cert_pem.as_bytes(),
        "the CA was renewed"
    );
    assert_eq!(
        secret(&server, OPERATOR_TLS_SECRET)[CERT_KEY],
        own[CERT_KEY],
        "nothing signed by the new CA before the API server has it"
    );
    server.clear_faults();
    let new_ca = Authority::from_secret_data(&secret(&server, CA_SECRET)).unwrap();
    eventually("the new CA's certificate, after the bundle", || {
        secret(&server, OPERATOR_TLS_SECRET)[CA_KEY] == new_ca.bundle_pem.as_bytes()
    })
    .await;
    let crd = server
        .get(
            "apiextensions.k8s.io/customresourcedefinitions",
            "",
            "clusterpodplacementconfigs.multiarch.openshift.io",
        )
        .unwrap();
    let injected = crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap();
    assert_eq!(
        STANDARD.decode(injected).unwrap(),
        new_ca.bundle_pem.as_bytes()
    );
    operator.stop().await;
}
