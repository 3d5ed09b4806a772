//! Placement by what images' binaries are (`binaryInspection`), end to end: images the
//! test builds and pushes to a real registry (Debian's docker-registry on 127.0.0.1), an
//! inspector reading their binaries served over gRPC, the scheduler on the fake API server.
//! An index whose amd64 entry names no level but whose program needs x86-64-v3 goes only
//! to v3 nodes, the v2 node refused by name; an index whose arm64 entry runs an amd64
//! program never goes to arm64, and the events say which build was left out and why.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{sync::Arc, time::Duration};

use common::*;
use multiarch_crd::names::NODE_VARIANT_LABEL;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector,
    binary_reads::BinaryReadingOptions,
    cache::CacheOptions,
    grpc::{self, RemoteInspector, ServiceLimits},
    keyring::Keyring,
    metrics::InspectorMetrics,
    registry::RegistryOptions,
    secrets::StaticKeyring,
    settings::RegistrySettings,
};
use multiarch_scheduler::in_cluster::metrics::SchedulerMetrics;
use multiarch_test_support::{
    elf,
    registry::{
        Options, Registry, TarEntry, gzip, layer_tar, platform, push_image_with_layers, push_index,
    },
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// An index of `(architecture its entry says, the program's ELF)` builds, pushed as
/// `repository:1`; returns its reference.
async fn index_of(reg: &Registry, repository: &str, builds: &[(&str, Vec<u8>)]) -> String {
    let mut entries = Vec::new();
    for (architecture, program) in builds {
        let layer = gzip(&layer_tar(&[TarEntry::File("server", program)]));
        let run = json!({"Entrypoint": ["/server"]});
        let digest = push_image_with_layers(reg, repository, architecture, run, &[layer]).await;
        entries.push((digest, platform("linux", architecture, None), None));
    }
    push_index(reg, repository, "1", false, &entries).await;
    format!("{}/{repository}:1", reg.addr)
}

/// The inspector of an install with `binaryInspection` on.
fn reading_inspector(reg: &Registry) -> Arc<Inspector> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registries.yaml");
    std::fs::write(&file, reg.settings_yaml()).unwrap();
    Arc::new(
        Inspector::new(
            RegistrySettings::load(&file).unwrap(),
            RegistryOptions::default(),
            CacheOptions::default(),
            Arc::new(StaticKeyring(Arc::new(Keyring::default()))),
            InspectorMetrics::default(),
        )
        .with_binary_reading(BinaryReadingOptions::default()),
    )
}

/// Asks until the image's builds are read (the reads run in the background).
async fn read_whole(inspector: &Inspector, image: &str) {
    let request = InspectRequest {
        image: image.to_owned(),
        namespace: "shop".into(),
        ..InspectRequest::default()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while inspector.inspect(&request).await.unwrap().binaries_pending {
        assert!(tokio::time::Instant::now() < deadline, "{image} never read");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn amd64_of_level(name: &str, level: &str) -> Value {
    let mut node = node(name, "amd64", "4");
    node["metadata"]["labels"][NODE_VARIANT_LABEL] = level.into();
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builds_are_placed_by_what_their_binaries_are() {
    let reg = Registry::start(Options::default());
    let arm64 = elf::Elf::new(64, false, elf::EM_AARCH64).bytes();
    // RHEL 10's way: the index names no level, the program needs x86-64-v3.
    let rhel10 = index_of(&reg, "rhel10", &[("amd64", elf::x86_64(None, 0b0111))]).await;
    // Its arm64 entry runs an amd64 program.
    let talos = index_of(
        &reg,
        "talos",
        &[
            ("amd64", elf::x86_64(None, 0b0001)),
            ("arm64", elf::x86_64(None, 0b0001)),
        ],
    )
    .await;
    let honest = index_of(&reg, "honest", &[("arm64", arm64)]).await;

    let inspector = reading_inspector(&reg);
    for image in [&rhel10, &talos, &honest] {
        read_whole(&inspector, image).await;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    let served = tokio::spawn(grpc::serve(
        listener,
        None,
        inspector.clone(),
        ServiceLimits::default(),
        stop.clone(),
    ));

    let server = FakeApiServer::start().await;
    server.apply("nodes", amd64_of_level("amd-v2", "v2"));
    server.apply("nodes", amd64_of_level("amd-v3", "v3"));
    server.apply("nodes", node("arm-1", "arm64", "4"));
    server.apply("pods", pod("first", &rhel10, "3"));
    let mut on_arm = pod("on-arm", &talos, "100m");
    on_arm["spec"]["nodeSelector"] = json!({"kubernetes.io/arch": "arm64"});
    server.apply("pods", on_arm);
    server.apply("pods", pod("anywhere", &talos, "100m"));
    server.apply("pods", pod("honest", &honest, "100m"));

    let runtime = start_with_inspector(
        &server,
        options("a", false),
        SchedulerMetrics::default(),
        Arc::new(RemoteInspector::new(&endpoint).unwrap()),
    );
    eventually("first, anywhere and honest bound", || {
        ["first", "anywhere", "honest"]
            .iter()
            .all(|p| node_of(&server, p).is_some())
    })
    .await;
    assert_eq!(node_of(&server, "first").as_deref(), Some("amd-v3"));
    assert_eq!(node_of(&server, "honest").as_deref(), Some("arm-1"));
    let left_out = format!(
        "image {talos}'s arm64 build runs a program built for amd64 (/server): not counted as runnable"
    );
    let anywhere = node_of(&server, "anywhere").unwrap();
    assert!(anywhere.starts_with("amd-"), "{anywhere}");
    eventually("Scheduled for anywhere", || {
        !events_for(&server, "anywhere").is_empty()
    })
    .await;
    let scheduled = events_for(&server, "anywhere");
    assert!(
        scheduled[0]["note"]
            .as_str()
            .unwrap()
            .ends_with(&format!("; images support amd64; {left_out}")),
        "{scheduled:?}"
    );

    // The arm64 build is not runnable: the arm64 node is refused for it, by name.
    eventually("FailedScheduling for on-arm", || {
        !events_for(&server, "on-arm").is_empty()
    })
    .await;
    let note = events_for(&server, "on-arm")[0]["note"].clone();
    assert!(
        note.as_str().unwrap().starts_with(&format!(
            "0/3 nodes are available: 1 node(s) didn't match the pod's image architectures (images support amd64) ({left_out}), 2 node(s) didn't match Pod's node affinity/selector."
        )),
        "{note}"
    );
    assert!(node_of(&server, "on-arm").is_none());

    // amd-v3 is full: the second v3 pod waits, the v2 node refused by the level read.
    server.apply("pods", pod("second", &rhel10, "3"));
    eventually("FailedScheduling for second", || {
        !events_for(&server, "second").is_empty()
    })
    .await;
    let note = events_for(&server, "second")[0]["note"].clone();
    assert!(
        note.as_str().unwrap().contains(&format!(
            "1 node(s) are below x86-64-v3 needed by image {rhel10}"
        )),
        "{note}"
    );
    assert!(node_of(&server, "second").is_none());

    runtime.shutdown().await.unwrap();
    stop.cancel();
    served.await.unwrap();
}
