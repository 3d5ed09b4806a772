//! `multiarch inspect` and `multiarch inspector` against a real registry.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::registry;

use std::{
    io::{Read, Write},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine;
use multiarch_inspector::{ImageInspector, InspectRequest, grpc::RemoteInspector};
use registry::{Options, Registry, platform, push_image, push_index};

fn multiarch(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(args)
        .output()
        .unwrap()
}

async fn fixture(reg: &Registry) -> String {
    let amd = push_image(reg, "shop/web", "linux", "amd64", None, false, None).await;
    let arm = push_image(reg, "shop/web", "linux", "arm", Some("v7"), false, None).await;
    push_index(
        reg,
        "shop/web",
        "1.0",
        false,
        &[
            (amd, platform("linux", "amd64", None), None),
            (arm, platform("linux", "arm", Some("v7")), None),
        ],
    )
    .await;
    let settings = reg.dir().join("registries.yaml");
    std::fs::write(&settings, reg.settings_yaml()).unwrap();
    settings.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn inspect_prints_platforms_as_text_and_json() {
    let reg = Registry::start(Options::default());
    let settings = fixture(&reg).await;
    let image = format!("{}/shop/web:1.0", reg.addr);

    let out = multiarch(&["inspect", &image, "--registries-config", &settings]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!("{image} (index, sha256:")),
        "{text}"
    );
    assert!(text.contains("  linux/amd64 "), "{text}");
    assert!(text.contains("  linux/arm/v7 "), "{text}");

    let out = multiarch(&[
        "inspect",
        &image,
        "--registries-config",
        &settings,
        "-o",
        "json",
    ]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["kind"], "index");
    assert_eq!(json["platforms"][1]["architecture"], "arm");
    assert_eq!(json["platforms"][1]["variant"], "v7");
}

/// An index whose amd64 build needs x86-64-v3 (its loader too), whose "arm64" build is an
/// amd64 binary, and whose s390x build lacks its program: (settings file, image).
async fn binaries_fixture(reg: &Registry) -> (String, String) {
    use multiarch_test_support::elf;
    use registry::{TarEntry, gzip, layer_tar, push_image_with_layers};
    let run = serde_json::json!({"Entrypoint": ["/entrypoint.sh"]});
    let script = TarEntry::File("entrypoint.sh", b"#!/server\n");
    // amd64: needs x86-64-v3 (its loader too); "arm64": an amd64 binary; s390x: the
    // program is missing.
    let v3 = elf::x86_64(Some("/lib64/ld.so"), 0b0111);
    let amd = push_image_with_layers(
        reg,
        "shop/api",
        "amd64",
        run.clone(),
        &[gzip(&layer_tar(&[
            script,
            TarEntry::File("server", &v3),
            TarEntry::File("lib64/ld.so", &elf::x86_64(None, 0b0111)),
        ]))],
    )
    .await;
    let script = TarEntry::File("entrypoint.sh", b"#!/server\n");
    let static_amd64 = elf::x86_64(None, 0);
    let arm = push_image_with_layers(
        reg,
        "shop/api",
        "arm64",
        run.clone(),
        &[layer_tar(&[
            script,
            TarEntry::File("server", &static_amd64),
        ])],
    )
    .await;
    let s390x = push_image_with_layers(
        reg,
        "shop/api",
        "s390x",
        run,
        &[layer_tar(&[TarEntry::File("other", b"")])],
    )
    .await;
    push_index(
        reg,
        "shop/api",
        "1.0",
        false,
        &[
            (amd, platform("linux", "amd64", None), None),
            (arm, platform("linux", "arm64", None), None),
            (s390x, platform("linux", "s390x", None), None),
        ],
    )
    .await;
    let settings = reg.dir().join("registries.yaml");
    std::fs::write(&settings, reg.settings_yaml()).unwrap();
    let image = format!("{}/shop/api:1.0", reg.addr);
    (settings.to_str().unwrap().to_owned(), image)
}

#[tokio::test]
async fn inspect_binaries_says_what_each_platform_really_runs() {
    let reg = Registry::start(Options::default());
    let (settings, image) = binaries_fixture(&reg).await;
    let settings = settings.as_str();
    let out = multiarch(&[
        "inspect",
        &image,
        "--binaries",
        "--registries-config",
        settings,
    ]);
    // One platform could not be read: said, and the exit code says so.
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "      /entrypoint.sh: a script (#!)",
        "      runs /server: amd64 ELF 64-bit LSB, dynamic, loader /lib64/ld.so",
        "      needs x86-64-v3 (its ISA notes)",
        "      runs /server: amd64 ELF 64-bit LSB, static",
        "      MISLABELLED: the platform says arm64, its binary is amd64",
        "      cannot read its binaries: image ",
    ] {
        assert!(text.contains(line), "{line:?} in:\n{text}");
    }
    assert!(
        text.contains("/entrypoint.sh is not in the image"),
        "{text}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the binaries of 1 platform(s) could not be read"),
        "{stderr}"
    );

    let out = multiarch(&[
        "inspect",
        &image,
        "--binaries",
        "--registries-config",
        settings,
        "-o",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let binaries = json["binaries"].as_array().unwrap();
    assert_eq!(binaries.len(), 3);
    assert_eq!(binaries[0]["platform"], "amd64");
    assert_eq!(binaries[0]["program"]["x86_64Level"], 3);
    assert_eq!(binaries[0]["interpreter"]["path"], "/lib64/ld.so");
    assert_eq!(binaries[1]["program"]["architecture"], "amd64");
    assert_eq!(binaries[1]["platform"], "arm64");
    assert!(
        binaries[2]["error"]
            .as_str()
            .unwrap()
            .contains("is not in the image")
    );
}

#[tokio::test]
async fn inspect_fails_with_a_clear_message_and_exit_code() {
    let reg = Registry::start(Options {
        basic_auth: true,
        ..Options::default()
    });
    let settings = fixture(&reg).await;
    let image = format!("{}/shop/web:1.0", reg.addr);
    let out = multiarch(&["inspect", &image, "--registries-config", &settings]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "error: unauthorized at {}: the pod's pull secrets have no credentials for this registry",
            reg.addr
        )
    );
    // With an auth file it works.
    let auth = reg.dir().join("auth.json");
    let token = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        registry::USER,
        registry::PASSWORD
    ));
    std::fs::write(
        &auth,
        format!(r#"{{"auths": {{"{}": {{"auth": "{token}"}}}}}}"#, reg.addr),
    )
    .unwrap();
    let out = multiarch(&[
        "inspect",
        &image,
        "--registries-config",
        &settings,
        "--authfile",
        auth.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn http_get(addr: &str, path: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[tokio::test]
async fn the_inspector_service_answers_over_grpc_and_exports_metrics() {
    let reg = Registry::start(Options::default());
    let settings = fixture(&reg).await;
    let grpc = format!("127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args([
            "inspector",
            "--no-kubernetes",
            "--listen",
            &grpc,
            "--metrics-addr",
            &metrics,
            "--registries-config",
            &settings,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&grpc).is_err()
        || std::net::TcpStream::connect(&metrics).is_err()
    {
        assert!(Instant::now() < deadline, "the inspector did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let remote = RemoteInspector::new(&format!("http://{grpc}")).unwrap();
    let request = InspectRequest {
        image: format!("{}/shop/web:1.0", reg.addr),
        namespace: "shop".into(),
        ..InspectRequest::default()
    };
    for _ in 0..3 {
        let info = remote.inspect(&request).await.unwrap();
        assert_eq!(info.platforms.len(), 2);
    }
    assert!(http_get(&metrics, "/healthz").starts_with("HTTP/1.1 200"));
    assert!(http_get(&metrics, "/readyz").starts_with("HTTP/1.1 200"));
    let body = http_get(&metrics, "/metrics");
    assert!(
        body.contains("multiarch_inspector_cache_hits_total 2"),
        "{body}"
    );
    assert!(
        body.contains("multiarch_inspector_cache_misses_total 1"),
        "{body}"
    );
    assert!(
        body.contains(&format!(
            "multiarch_inspector_registry_inspections_total{{registry=\"{}\",result=\"ok\"}} 1",
            reg.addr
        )),
        "{body}"
    );
    assert!(
        body.contains("multiarch_inspector_cache_entries 1"),
        "{body}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
