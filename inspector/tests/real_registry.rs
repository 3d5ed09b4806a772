//! Image inspection against a real registry (Debian's docker-registry on 127.0.0.1), with
//! fixtures pushed by the tests: no mock of the registry.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::registry;

use std::{sync::Arc, time::Duration};

use base64::Engine;
use multiarch_inspector::{
    ImageInspector, InspectError, InspectRequest, Inspector, ManifestKind, cache::CacheOptions,
    keyring::Keyring, metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use registry::{Options, Registry, platform, push_image, push_index};

fn settings(yaml: &str) -> RegistrySettings {
    let dir = std::env::temp_dir().join(format!(
        "multiarch-settings-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("registries.yaml");
    std::fs::write(&file, yaml).unwrap();
    let s = RegistrySettings::load(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    s
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn fast() -> RegistryOptions {
    RegistryOptions {
        connect_timeout: Duration::from_secs(2),
        read_timeout: Duration::from_secs(2),
        total_timeout: Duration::from_secs(10),
        retry_backoff: Duration::from_millis(20),
        ..RegistryOptions::default()
    }
}

fn inspector(settings: RegistrySettings, keyring: Keyring, options: RegistryOptions) -> Inspector {
    Inspector::new(
        settings,
        options,
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

fn platforms(info: &multiarch_inspector::ImageInfo) -> Vec<String> {
    info.platform_list()
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn keyring_for(addr: &str, user: &str, password: &str) -> Keyring {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut k = Keyring::default();
    k.add_docker_config_json(
        format!(r#"{{"auths": {{"{addr}": {{"auth": "{auth}"}}}}}}"#).as_bytes(),
    )
    .unwrap();
    k
}

#[tokio::test]
async fn oci_index_docker_list_single_manifests_and_attestations() {
    let reg = Registry::start(Options::default());
    // An OCI index with four architectures.
    let mut entries = Vec::new();
    for arch in ["amd64", "arm64", "ppc64le", "s390x"] {
        let pushed = push_image(&reg, "multi", "linux", arch, None, false, None).await;
        entries.push((pushed, platform("linux", arch, None), None));
    }
    let index = push_index(&reg, "multi", "v1", false, &entries).await;
    // A Docker manifest list with arm/v7 and arm64/v8.
    let v7 = push_image(&reg, "armlist", "linux", "arm", Some("v7"), true, None).await;
    let v8 = push_image(&reg, "armlist", "linux", "arm64", Some("v8"), true, None).await;
    push_index(
        &reg,
        "armlist",
        "v1",
        true,
        &[
            (v7, platform("linux", "arm", Some("v7")), None),
            (v8, platform("linux", "arm64", Some("v8")), None),
        ],
    )
    .await;
    // Single-arch images of both media types.
    push_image(
        &reg,
        "single-oci",
        "linux",
        "s390x",
        None,
        false,
        Some("v1"),
    )
    .await;
    push_image(
        &reg,
        "single-docker",
        "linux",
        "ppc64le",
        None,
        true,
        Some("v1"),
    )
    .await;
    // An index with buildx attestation manifests and a Windows entry.
    let amd = push_image(&reg, "attested", "linux", "amd64", None, false, None).await;
    let att = push_image(&reg, "attested", "unknown", "unknown", None, false, None).await;
    let win = push_image(&reg, "attested", "windows", "amd64", None, false, None).await;
    let annotations = serde_json::json!({"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": amd.digest});
    push_index(
        &reg,
        "attested",
        "v1",
        false,
        &[
            (amd, platform("linux", "amd64", None), None),
            (att, platform("unknown", "unknown", None), Some(annotations)),
            (win, platform("windows", "amd64", None), None),
        ],
    )
    .await;

    let inspector = inspector(settings(&reg.settings_yaml()), Keyring::default(), fast());
    let a = &reg.addr;
    let info = inspector
        .inspect(&request(&format!("{a}/multi:v1")))
        .await
        .unwrap();
    assert_eq!(info.kind, ManifestKind::Index);
    assert_eq!(info.digest, index.digest);
    assert_eq!(platforms(&info), ["amd64", "arm64", "ppc64le", "s390x"]);
    assert!(
        info.platforms
            .iter()
            .all(|p| p.digest.starts_with("sha256:"))
    );

    let info = inspector
        .inspect(&request(&format!("{a}/armlist:v1")))
        .await
        .unwrap();
    assert_eq!(platforms(&info), ["arm/v7", "arm64"]);

    let info = inspector
        .inspect(&request(&format!("{a}/single-oci:v1")))
        .await
        .unwrap();
    assert_eq!(
        (info.kind, platforms(&info)),
        (ManifestKind::Manifest, vec!["s390x".to_owned()])
    );
    let info = inspector
        .inspect(&request(&format!("{a}/single-docker:v1")))
        .await
        .unwrap();
    assert_eq!(
        (info.kind, platforms(&info)),
        (ManifestKind::Manifest, vec!["ppc64le".to_owned()])
    );

    let info = inspector
        .inspect(&request(&format!("{a}/attested:v1")))
        .await
        .unwrap();
    assert_eq!(platforms(&info), ["amd64", "windows/amd64"]);
}

#[tokio::test]
async fn digests_tag_plus_digest_default_tag_and_nested_indexes() {
    let reg = Registry::start(Options::default());
    let amd = push_image(&reg, "app", "linux", "amd64", None, false, None).await;
    let arm = push_image(&reg, "app", "linux", "arm64", None, false, None).await;
    let inner = push_index(
        &reg,
        "app",
        "inner",
        false,
        &[(arm, platform("linux", "arm64", None), None)],
    )
    .await;
    let outer = push_index(
        &reg,
        "app",
        "latest",
        false,
        &[
            (amd.clone(), platform("linux", "amd64", None), None),
            (inner, serde_json::Value::Null, None),
        ],
    )
    .await;
    let inspector = inspector(settings(&reg.settings_yaml()), Keyring::default(), fast());
    let a = &reg.addr;

    // No tag means latest; the nested index contributes its platforms.
    let info = inspector
        .inspect(&request(&format!("{a}/app")))
        .await
        .unwrap();
    assert_eq!(info.image, format!("{a}/app:latest"));
    assert_eq!(platforms(&info), ["amd64", "arm64"]);

    let info = inspector
        .inspect(&request(&format!("{a}/app@{}", outer.digest)))
        .await
        .unwrap();
    assert_eq!(platforms(&info), ["amd64", "arm64"]);
    // Tag and digest: the digest decides.
    let info = inspector
        .inspect(&request(&format!("{a}/app:inner@{}", amd.digest)))
        .await
        .unwrap();
    assert_eq!(platforms(&info), ["amd64"]);

    // Deeper than allowed.
    let shallow = Inspector::new(
        settings(&reg.settings_yaml()),
        RegistryOptions {
            max_index_depth: 0,
            ..fast()
        },
        CacheOptions::default(),
        Arc::new(StaticKeyring::default()),
        InspectorMetrics::default(),
    );
    let err = shallow
        .inspect(&request(&format!("{a}/app")))
        .await
        .unwrap_err();
    assert!(matches!(err, InspectError::TooDeep { .. }), "{err}");
}

#[tokio::test]
async fn private_repository_behind_basic_auth() {
    let reg = Registry::start(Options {
        basic_auth: true,
        ..Options::default()
    });
    push_image(&reg, "private", "linux", "arm64", None, false, Some("v1")).await;
    let image = format!("{}/private:v1", reg.addr);

    let anonymous = inspector(settings(&reg.settings_yaml()), Keyring::default(), fast());
    let err = anonymous.inspect(&request(&image)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "unauthorized at {}: the pod's pull secrets have no credentials for this registry",
            reg.addr
        )
    );
    assert!(!err.is_transient());

    let wrong = inspector(
        settings(&reg.settings_yaml()),
        keyring_for(&reg.addr, registry::USER, "wrong"),
        fast(),
    );
    let err = wrong.inspect(&request(&image)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "unauthorized at {}: the registry rejected the pod's pull-secret credentials",
            reg.addr
        )
    );

    let right = inspector(
        settings(&reg.settings_yaml()),
        keyring_for(&reg.addr, registry::USER, registry::PASSWORD),
        fast(),
    );
    let info = right.inspect(&request(&image)).await.unwrap();
    assert_eq!(platforms(&info), ["arm64"]);
}

#[tokio::test]
async fn tls_with_a_ca_made_in_the_test() {
    let reg = Registry::start(Options {
        tls: true,
        ..Options::default()
    });
    push_image(&reg, "secure", "linux", "amd64", None, false, Some("v1")).await;
    let image = format!("{}/secure:v1", reg.addr);

    let untrusting = inspector(RegistrySettings::default(), Keyring::default(), fast());
    let err = untrusting.inspect(&request(&image)).await.unwrap_err();
    assert!(matches!(err, InspectError::Tls { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("set caFile for it in the registry settings"),
        "{err}"
    );

    let trusting = inspector(settings(&reg.settings_yaml()), Keyring::default(), fast());
    assert_eq!(
        platforms(&trusting.inspect(&request(&image)).await.unwrap()),
        ["amd64"]
    );
}

#[tokio::test]
async fn mirrors_are_tried_first_and_blocked_registries_refused() {
    let source = Registry::start(Options::default());
    let mirror = Registry::start(Options::default());
    push_image(
        &mirror,
        "mirrored",
        "linux",
        "s390x",
        None,
        false,
        Some("v1"),
    )
    .await;
    push_image(
        &source,
        "only-source",
        "linux",
        "arm64",
        None,
        false,
        Some("v1"),
    )
    .await;
    let yaml = format!(
        "registries:\n  - registry: \"{s}\"\n    insecure: true\n    mirrors: [\"{m}\"]\n  - registry: \"{m}\"\n    insecure: true\n  - registry: blocked.example.com\n    blocked: true\n",
        s = source.addr,
        m = mirror.addr
    );
    let inspector = inspector(settings(&yaml), Keyring::default(), fast());
    // Served by the mirror though the source does not have it.
    let info = inspector
        .inspect(&request(&format!("{}/mirrored:v1", source.addr)))
        .await
        .unwrap();
    assert_eq!(info.image, format!("{}/mirrored:v1", source.addr));
    assert_eq!(platforms(&info), ["s390x"]);
    // Not on the mirror: the source answers.
    let info = inspector
        .inspect(&request(&format!("{}/only-source:v1", source.addr)))
        .await
        .unwrap();
    assert_eq!(platforms(&info), ["arm64"]);

    let err = inspector
        .inspect(&request("blocked.example.com/x/y:1"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "registry blocked.example.com is blocked by the registry settings"
    );
}

#[tokio::test]
async fn missing_images_and_bad_references() {
    let reg = Registry::start(Options::default());
    let inspector = inspector(settings(&reg.settings_yaml()), Keyring::default(), fast());
    let image = format!("{}/nothing:here", reg.addr);
    let err = inspector.inspect(&request(&image)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("image {image} not found: check the repository name and the tag or digest")
    );
    let err = inspector
        .inspect(&request("not a reference"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, InspectError::InvalidReference { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn single_flight_and_cache_bypass_against_the_real_registry() {
    let reg = Registry::start(Options::default());
    let mut entries = Vec::new();
    for arch in ["amd64", "arm64"] {
        entries.push((
            push_image(&reg, "hot", "linux", arch, None, false, None).await,
            platform("linux", arch, None),
            None,
        ));
    }
    push_index(&reg, "hot", "v1", false, &entries).await;
    let inspector = Arc::new(inspector(
        settings(&reg.settings_yaml()),
        Keyring::default(),
        fast(),
    ));
    let image = format!("{}/hot:v1", reg.addr);
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let inspector = inspector.clone();
            let image = image.clone();
            tokio::spawn(async move { inspector.inspect(&request(&image)).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(platforms(&t.await.unwrap().unwrap()), ["amd64", "arm64"]);
    }
    assert_eq!(
        inspector.registry_requests(),
        1,
        "one manifest GET for 200 concurrent requests"
    );
    inspector.inspect(&request(&image)).await.unwrap();
    assert_eq!(
        inspector.registry_requests(),
        1,
        "then answered from the cache"
    );
    inspector
        .inspect(&InspectRequest {
            bypass_cache: true,
            ..request(&image)
        })
        .await
        .unwrap();
    assert_eq!(
        inspector.registry_requests(),
        2,
        "imagePullPolicy Always asks again"
    );
}

#[tokio::test]
async fn a_registry_that_stops_answering_times_out() {
    let addr = registry::silent_server().await;
    let yaml = format!("registries:\n  - registry: \"{addr}\"\n    insecure: true\n");
    let options = RegistryOptions {
        read_timeout: Duration::from_millis(300),
        total_timeout: Duration::from_secs(2),
        attempts: 2,
        ..fast()
    };
    let inspector = inspector(settings(&yaml), Keyring::default(), options);
    let started = std::time::Instant::now();
    let err = inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the total timeout"
    );
    assert!(
        matches!(
            err,
            InspectError::Unreachable { .. } | InspectError::Timeout { .. }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn http_500_is_retried_a_bounded_number_of_times() {
    let (addr, requests) = registry::canned_server(500, "text/plain", "boom").await;
    let yaml = format!("registries:\n  - registry: \"{addr}\"\n    insecure: true\n");
    let inspector = inspector(settings(&yaml), Keyring::default(), fast());
    let err = inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("registry {addr} answered HTTP 500 3 times in a row; it may be overloaded or down")
    );
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 3);
    // Negative cache: asking again within 30 s does not hit the registry.
    inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_malformed_manifest_is_a_clear_error_without_retries() {
    let (addr, requests) = registry::canned_server(
        200,
        "application/vnd.oci.image.index.v1+json",
        "{\"manifests\": [oops",
    )
    .await;
    let yaml = format!("registries:\n  - registry: \"{addr}\"\n    insecure: true\n");
    let inspector = inspector(settings(&yaml), Keyring::default(), fast());
    let err = inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert!(matches!(err, InspectError::Malformed { .. }), "{err}");
    assert!(err.to_string().contains("not valid JSON"), "{err}");
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn connection_refused_is_unreachable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let yaml = format!("registries:\n  - registry: \"{addr}\"\n    insecure: true\n");
    let inspector = inspector(settings(&yaml), Keyring::default(), fast());
    let err = inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert!(matches!(err, InspectError::Unreachable { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("registry {addr} is unreachable")),
        "{err}"
    );
}

#[tokio::test]
async fn an_oversized_manifest_is_refused() {
    // 5 MiB of valid JSON: over the 4 MiB a manifest may have.
    let body: &'static str = Box::leak(
        format!(
            "{{\"manifests\": [], \"pad\": \"{}\"}}",
            "x".repeat(5 * 1024 * 1024)
        )
        .into_boxed_str(),
    );
    let (addr, _) =
        registry::canned_server(200, "application/vnd.oci.image.index.v1+json", body).await;
    let yaml = format!("registries:\n  - registry: \"{addr}\"\n    insecure: true\n");
    let inspector = inspector(settings(&yaml), Keyring::default(), fast());
    let err = inspector
        .inspect(&request(&format!("{addr}/app:v1")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("manifest exceeds 4 MiB"), "{err}");
}
