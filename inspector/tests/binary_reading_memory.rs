//! A 2 GiB layer is streamed, never held: the program behind 2 GiB of another file in the
//! same layer is found and read (both passes go through the whole layer) while this test
//! process's peak resident memory stays far below the layer's size. Alone in its process,
//! so that the peak is this read's. Against a real registry (Debian's docker-registry),
//! the layer placed in its storage as a sparse file.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    io::{Seek, SeekFrom, Write},
    sync::Arc,
    time::Instant,
};

use multiarch_inspector::{
    InspectRequest, Inspector, binary_reading::BinaryLimits, cache::CacheOptions, keyring::Keyring,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use multiarch_test_support::{
    elf,
    memory::peak_rss,
    registry::{Options, Registry, push_image_with_placed_layers},
};
use serde_json::json;

const PADDING: u64 = 2 << 30;
/// What the read may add to the process's peak: the layer is 2 GiB.
const BOUND: u64 = 64 << 20;

/// An uncompressed layer tar: `padding` (2 GiB of zeros, a hole in the file), then
/// `server`, a v2 x86-64 binary.
fn sparse_layer(path: &std::path::Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let mut header = tar::Header::new_gnu();
    header.set_path("padding").unwrap();
    header.set_size(PADDING);
    header.set_mode(0o644);
    header.set_cksum();
    file.write_all(header.as_bytes()).unwrap();
    file.seek(SeekFrom::Current(i64::try_from(PADDING).unwrap()))
        .unwrap();
    let mut tail = tar::Builder::new(Vec::new());
    let server = elf::x86_64(None, 0b0011);
    let mut header = tar::Header::new_gnu();
    header.set_size(server.len() as u64);
    header.set_mode(0o755);
    tail.append_data(&mut header, "server", server.as_slice())
        .unwrap();
    file.write_all(&tail.into_inner().unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_gigabyte_layer_is_streamed_never_held() {
    let reg = Registry::start(Options::default());
    let layer = reg.dir().join("big-layer.tar");
    sparse_layer(&layer);
    let placed = reg.place_blob("big", &layer);
    assert!(placed.1 > PADDING);
    let pushed = push_image_with_placed_layers(
        &reg,
        "big",
        "amd64",
        json!({"Entrypoint": ["/server"]}),
        &[],
        std::slice::from_ref(&placed),
    )
    .await;
    let file = reg.dir().join("registries.yaml");
    std::fs::write(&file, reg.settings_yaml()).unwrap();
    let inspector = Inspector::new(
        RegistrySettings::load(&file).unwrap(),
        RegistryOptions::default(),
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(Keyring::default()))),
        InspectorMetrics::default(),
    );
    let before = peak_rss();
    let started = Instant::now();
    let facts = inspector
        .read_binaries(
            &InspectRequest {
                image: format!("{}/big@{}", reg.addr, pushed.digest),
                namespace: "ns".into(),
                ..InspectRequest::default()
            },
            None,
            BinaryLimits::default(),
        )
        .await
        .unwrap();
    let took = started.elapsed();
    let peak = peak_rss();
    assert_eq!(facts.program.path, "/server");
    assert_eq!(facts.x86_64_level(), Some(2));
    // The links pass and the program's pass each read the whole layer.
    assert!(facts.fetched_bytes >= 2 * placed.1, "{facts:?}");
    println!(
        "read {} bytes of a {} byte layer in {took:.1?}; peak RSS {} MiB before, {} MiB after",
        facts.fetched_bytes,
        placed.1,
        before >> 20,
        peak >> 20
    );
    assert!(
        peak.saturating_sub(before) < BOUND,
        "the read raised the peak from {} MiB to {} MiB",
        before >> 20,
        peak >> 20
    );
}
