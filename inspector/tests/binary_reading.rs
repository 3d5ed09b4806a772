//! Reading what an image really runs, against a real registry (Debian's docker-registry
//! on 127.0.0.1) with images the tests push: the program its config names, found
//! through links, whiteouts and `#!` lines in gzip, zstd and plain layers; its ELF facts and
//! its loader's (a real one: this machine's); an index entry whose binary is of another
//! architecture; and the bounds.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::{Arc, atomic::Ordering};

use multiarch_inspector::{
    InspectError, InspectRequest, Inspector, binary_reading::BinaryLimits, cache::CacheOptions,
    keyring::Keyring, metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use multiarch_policy::platform::Platform;
use multiarch_test_support::{
    chunked_layer::chunked_layer,
    elf,
    range_blind_proxy::range_blind_proxy,
    registry::{
        Options, Registry, TarEntry, gzip, layer_tar, platform, push_image_with_annotated_layers,
        push_image_with_layers, push_index,
    },
};
use serde_json::json;

fn inspector(reg: &Registry) -> Inspector {
    inspector_with(&reg.settings_yaml())
}

/// An inspector with these registry settings (YAML).
fn inspector_with(settings: &str) -> Inspector {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    std::fs::write(&file, settings).unwrap();
    Inspector::new(
        RegistrySettings::load(&file).unwrap(),
        RegistryOptions::default(),
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(Keyring::default()))),
        InspectorMetrics::default(),
    )
}

fn request(image: String) -> InspectRequest {
    InspectRequest {
        image,
        namespace: "ns".into(),
        ..InspectRequest::default()
    }
}

/// This machine's architecture, as OCI names it.
fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// The first MiB of a real dynamic executable (this test) and its real loader.
fn real_binaries() -> (Vec<u8>, Vec<u8>, String) {
    let mut exe = std::fs::read("/proc/self/exe").unwrap();
    exe.truncate(1 << 20);
    let facts = multiarch_inspector::elf_facts::read(&exe).unwrap();
    let loader_path = facts.interpreter.unwrap();
    let loader = std::fs::read(std::fs::canonicalize(&loader_path).unwrap()).unwrap();
    (exe, loader, loader_path)
}

#[tokio::test]
async fn the_program_an_image_runs_is_found_and_read_through_links_whiteouts_and_scripts() {
    let reg = Registry::start(Options::default());
    let inspector = inspector(&reg);
    let (exe, loader, loader_path) = real_binaries();
    let real_loader = "/usr/lib/real/ld.so";

    // A merged-usr base (gzip), an app layer (plain) replacing a lower `app`, and a
    // bare command found in the config's PATH through `/bin -> usr/bin`.
    let base = gzip(&layer_tar(&[
        TarEntry::Link("bin", "usr/bin"),
        TarEntry::File(&real_loader[1..], &loader),
        TarEntry::Link(&loader_path[1..], real_loader),
        TarEntry::File("usr/bin/app", b"#!/bin/false\n"),
        TarEntry::File("usr/bin/old-app", &elf::x86_64(None, 0)),
    ]));
    let app = layer_tar(&[
        TarEntry::File("usr/bin/.wh.app", b""),
        TarEntry::File("usr/bin/app", &exe),
    ]);
    let pushed = push_image_with_layers(
        &reg,
        "real",
        host_arch(),
        json!({"Cmd": ["app", "--serve"], "Env": ["PATH=/usr/local/bin:/bin"]}),
        &[base.clone(), app],
    )
    .await;
    let image = format!("{}/real@{}", reg.addr, pushed.digest);
    let facts = inspector
        .read_binaries(&request(image.clone()), None, BinaryLimits::default())
        .await
        .unwrap();
    assert_eq!(facts.digest, pushed.digest);
    assert_eq!(facts.command, "app");
    assert_eq!(facts.program.path, "/usr/bin/app");
    assert_eq!(facts.program.architecture, host_arch());
    assert_eq!(
        facts.program.interpreter.as_deref(),
        Some(loader_path.as_str())
    );
    let interpreter = facts.interpreter.as_ref().unwrap();
    assert_eq!(interpreter.path, real_loader);
    assert_eq!(interpreter.architecture, host_arch());
    assert_eq!(facts.mislabelled(), None);
    assert!(facts.fetched_bytes > 0);

    // An entrypoint script whose `#!` names a binary needing x86-64-v3, with a loader
    // built for v3 (as glibc for RHEL 10 is): the image needs v3.
    let v3 = layer_tar(&[
        TarEntry::File("entrypoint.sh", b"#!/opt/server -x\nexec nothing\n"),
        TarEntry::File(
            "opt/server",
            &elf::x86_64(Some("/lib64/ld-linux-x86-64.so.2"), 0b0111),
        ),
        TarEntry::Link("lib64", "usr/lib64"),
        TarEntry::File("usr/lib64/ld-linux-x86-64.so.2", &elf::x86_64(None, 0b0111)),
    ]);
    let pushed = push_image_with_layers(
        &reg,
        "ubi10",
        "amd64",
        json!({"Entrypoint": ["/entrypoint.sh"], "Cmd": ["run"]}),
        &[gzip(&v3)],
    )
    .await;
    let facts = inspector
        .read_binaries(
            &request(format!("{}/ubi10@{}", reg.addr, pushed.digest)),
            None,
            BinaryLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(facts.scripts, ["/entrypoint.sh"]);
    assert_eq!(facts.program.path, "/opt/server");
    assert_eq!(facts.program.x86_64_level, Some(3));
    assert_eq!(
        facts.interpreter.as_ref().unwrap().path,
        "/usr/lib64/ld-linux-x86-64.so.2"
    );
    assert_eq!(facts.x86_64_level(), Some(3));

    // A command the layers do not have (removed by a whiteout): said, not guessed.
    let gone = layer_tar(&[TarEntry::File("usr/bin/.wh.old-app", b"")]);
    let pushed = push_image_with_layers(
        &reg,
        "gone",
        "amd64",
        json!({"Entrypoint": ["/bin/old-app"]}),
        &[base, gone],
    )
    .await;
    let error = inspector
        .read_binaries(
            &request(format!("{}/gone@{}", reg.addr, pushed.digest)),
            None,
            BinaryLimits::default(),
        )
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("/usr/bin/old-app is not in the image"),
        "{error}"
    );
}

#[tokio::test]
async fn an_index_entry_whose_binary_is_another_architecture_is_mislabelled() {
    let reg = Registry::start(Options::default());
    let inspector = inspector(&reg);
    let static_amd64 = gzip(&layer_tar(&[TarEntry::File(
        "server",
        &elf::x86_64(None, 0b0001),
    )]));
    let arm64_binary = elf::Elf::new(64, false, elf::EM_AARCH64).bytes();
    let real_arm64 = gzip(&layer_tar(&[TarEntry::File("server", &arm64_binary)]));
    let run = json!({"Entrypoint": ["/server"]});
    // Both entries' configs say arm64; only one binary is.
    let wrong = push_image_with_layers(&reg, "talos", "arm64", run.clone(), &[static_amd64]).await;
    let right = push_image_with_layers(&reg, "talos", "arm64", run, &[real_arm64]).await;
    push_index(
        &reg,
        "talos",
        "v1",
        false,
        &[
            (wrong, platform("linux", "arm64", None), None),
            (right, platform("linux", "arm", Some("v8")), None),
        ],
    )
    .await;
    let image = format!("{}/talos:v1", reg.addr);
    let arm64 = Platform::linux("arm64");
    let facts = inspector
        .read_binaries(
            &request(image.clone()),
            Some(&arm64),
            BinaryLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(facts.platform, arm64);
    assert_eq!(facts.program.architecture, "amd64");
    assert_eq!(facts.mislabelled(), Some("amd64"));
    assert_eq!(facts.program.interpreter, None, "static");
    let arm_v8 = Platform::parse("linux/arm/v8").unwrap();
    let facts = inspector
        .read_binaries(
            &request(image.clone()),
            Some(&arm_v8),
            BinaryLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(facts.program.architecture, "arm64");
    // A platform the index does not have.
    let error = inspector
        .read_binaries(
            &request(image),
            Some(&Platform::linux("s390x")),
            BinaryLimits::default(),
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("the index has no s390x image"),
        "{error}"
    );
}

/// zstd layers (OCI's `tar+zstd`, as `podman push --compression-format zstd` writes them)
/// are read like gzip ones: a merged-usr link in one, the program behind it in the next.
#[tokio::test]
async fn zstd_layers_are_read() {
    let reg = Registry::start(Options::default());
    let inspector = inspector(&reg);
    let zstd = |tar: Vec<u8>| zstd::encode_all(tar.as_slice(), 3).unwrap();
    let base = zstd(layer_tar(&[TarEntry::Link("bin", "usr/bin")]));
    let app = zstd(layer_tar(&[TarEntry::File(
        "usr/bin/server",
        &elf::x86_64(None, 0b0111),
    )]));
    let pushed = push_image_with_layers(
        &reg,
        "zstd",
        "amd64",
        json!({"Entrypoint": ["/bin/server"]}),
        &[base, app],
    )
    .await;
    let facts = inspector
        .read_binaries(
            &request(format!("{}/zstd@{}", reg.addr, pushed.digest)),
            None,
            BinaryLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(facts.program.path, "/usr/bin/server");
    assert_eq!(facts.program.architecture, "amd64");
    assert_eq!(facts.x86_64_level(), Some(3));
}

#[tokio::test]
async fn what_a_read_fetches_and_unpacks_is_bounded() {
    let reg = Registry::start(Options::default());
    let inspector = inspector(&reg);
    // 8 MiB of padding before the binary, compressing to almost nothing.
    let padding = vec![0u8; 8 << 20];
    let layer = gzip(&layer_tar(&[
        TarEntry::File("padding", &padding),
        TarEntry::File("server", &elf::x86_64(None, 0)),
    ]));
    let pushed = push_image_with_layers(
        &reg,
        "padded",
        "amd64",
        json!({"Entrypoint": ["/server"]}),
        std::slice::from_ref(&layer),
    )
    .await;
    let image = format!("{}/padded@{}", reg.addr, pushed.digest);
    let request = request(image);
    let read = |limits: BinaryLimits| inspector.read_binaries(&request, None, limits);
    assert!(read(BinaryLimits::default()).await.is_ok());
    let error = read(BinaryLimits {
        unpacked_bytes: 1 << 20,
        ..BinaryLimits::default()
    })
    .await
    .unwrap_err();
    assert!(
        matches!(&error, InspectError::Malformed { detail, .. } if detail.contains("unpack to more than 1048576 bytes")),
        "{error}"
    );
    let error = read(BinaryLimits {
        fetched_bytes: (layer.len() / 2) as u64,
        ..BinaryLimits::default()
    })
    .await
    .unwrap_err();
    assert!(
        error.to_string().contains("bytes of layers fetched"),
        "{error}"
    );
}

/// `len` bytes no compressor shrinks (xorshift), the same on every run.
fn incompressible(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

/// An image whose top layer is zstd:chunked: 16 MiB of incompressible data ahead of a
/// real program (replacing, through a whiteout, a v1 binary of the gzip layer below) and
/// its real loader; `PATH` through the lower layer's `/bin -> usr/bin`. The blob's size.
async fn push_chunked(reg: &Registry) -> (String, usize) {
    let (exe, loader, loader_path) = real_binaries();
    let real_loader = "usr/lib/real/ld.so";
    let base = gzip(&layer_tar(&[
        TarEntry::Link("bin", "usr/bin"),
        TarEntry::File("usr/bin/app", &elf::x86_64(None, 0)),
    ]));
    let padding = incompressible(16 << 20);
    let (chunked, annotations) = chunked_layer(&[
        TarEntry::File("opt/padding", &padding),
        TarEntry::File("usr/bin/.wh.app", b""),
        TarEntry::File("usr/bin/app", &exe),
        TarEntry::File(real_loader, &loader),
        TarEntry::Link(&loader_path[1..], &format!("/{real_loader}")),
    ]);
    let size = chunked.len();
    let pushed = push_image_with_annotated_layers(
        reg,
        "chunked",
        host_arch(),
        json!({"Cmd": ["app"], "Env": ["PATH=/bin"]}),
        &[(base, serde_json::Value::Null), (chunked, annotations)],
        &[],
    )
    .await;
    (pushed.digest, size)
}

/// A zstd:chunked layer (podman's and buildah's `--compression-format zstd:chunked`) is
/// read by ranges: its table of contents, then only the frames of the program and of its
/// loader, never the 16 MiB in front of them.
#[tokio::test]
async fn a_zstd_chunked_layer_is_read_by_ranges_not_whole() {
    let reg = Registry::start(Options::default());
    let (digest, size) = push_chunked(&reg).await;
    let (_, _, loader_path) = real_binaries();
    let facts = inspector(&reg)
        .read_binaries(
            &request(format!("{}/chunked@{digest}", reg.addr)),
            None,
            BinaryLimits::default(),
        )
        .await
        .unwrap();
    assert_eq!(facts.program.path, "/usr/bin/app");
    assert_eq!(facts.program.architecture, host_arch());
    assert_eq!(
        facts.program.interpreter.as_deref(),
        Some(loader_path.as_str())
    );
    assert_eq!(facts.interpreter.unwrap().path, "/usr/lib/real/ld.so");
    // The gzip layer (streamed twice: links, then the whiteout hiding its app), the table
    // read three times, the program's and the loader's frames: far less than the layer.
    println!(
        "zstd:chunked: {} bytes fetched of a {size}-byte layer",
        facts.fetched_bytes
    );
    assert!(size > 16 << 20);
    assert!(
        facts.fetched_bytes < 4 << 20,
        "{} bytes fetched of a {size}-byte layer",
        facts.fetched_bytes
    );
}

/// Behind a registry that answers ranges with the whole blob, the same layer is streamed
/// as any other (one range asked for, its answer not read), with the same facts.
#[tokio::test]
async fn a_registry_without_range_requests_has_chunked_layers_streamed() {
    let reg = Registry::start(Options::default());
    let (digest, size) = push_chunked(&reg).await;
    let (proxy, dropped) = range_blind_proxy(&reg.addr).await;
    let facts = inspector_with(&format!(
        "registries:\n  - registry: \"{proxy}\"\n    insecure: true\n"
    ))
    .read_binaries(
        &request(format!("{proxy}/chunked@{digest}")),
        None,
        BinaryLimits::default(),
    )
    .await
    .unwrap();
    assert_eq!(facts.program.path, "/usr/bin/app");
    assert_eq!(facts.program.architecture, host_arch());
    assert_eq!(facts.interpreter.unwrap().path, "/usr/lib/real/ld.so");
    println!(
        "no ranges: {} bytes fetched of a {size}-byte layer",
        facts.fetched_bytes
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 1, "one range asked for");
    // The layer streamed for its links, then for the program and for its loader.
    assert!(
        facts.fetched_bytes > 2 * size as u64,
        "{} bytes fetched of a {size}-byte layer",
        facts.fetched_bytes
    );
}
