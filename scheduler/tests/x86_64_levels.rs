//! x86-64 micro-architecture levels against the fake API server: a pod whose image's amd64
//! build needs x86-64-v3 goes only to an amd64 node of that level or above, waits saying
//! which nodes are below it, and is placed once a node's label says it is high enough. A
//! node without multiarch's label is read by node-feature-discovery's CPUID labels.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use common::*;
use multiarch_crd::names::NODE_VARIANT_LABEL;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_policy::node_level::NFD_CPUID_PREFIX;
use serde_json::Value;

fn amd64_of_level(name: &str, level: &str) -> Value {
    let mut node = node(name, "amd64", "4");
    node["metadata"]["labels"][NODE_VARIANT_LABEL] = level.into();
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_built_for_x86_64_v3_goes_only_to_v3_nodes() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", amd64_of_level("amd-v2", "v2"));
    server.apply("nodes", amd64_of_level("amd-v3", "v3"));
    server.apply("nodes", node("z-1", "s390x", "4"));
    server.apply("pods", pod("first", "ubi10:1", "3"));
    server.apply("pods", pod("plain", "amd:1", "100m"));

    let runtime = start(&server, "a", false);
    eventually("first and plain bound", || {
        node_of(&server, "first").is_some() && node_of(&server, "plain").is_some()
    })
    .await;
    assert_eq!(node_of(&server, "first").as_deref(), Some("amd-v3"));

    // amd-v3 is full: the second waits, the v2 node refused by name, not as a mismatch.
    server.apply("pods", pod("second", "ubi10:1", "3"));
    eventually("FailedScheduling for second", || {
        !events_for(&server, "second").is_empty()
    })
    .await;
    assert_eq!(
        events_for(&server, "second")[0]["note"],
        "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) are below x86-64-v3 needed by image ubi10:1, 1 node(s) didn't match the pod's image architectures (images support amd64/v3, arm64). no new claims to deallocate, preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    );
    assert!(node_of(&server, "second").is_none());

    // The node's level is read again when its label changes: the pod is placed there.
    let mut upgraded = server.get("nodes", "", "amd-v2").unwrap();
    upgraded["metadata"]["labels"][NODE_VARIANT_LABEL] = "v4".into();
    server.apply("nodes", upgraded);
    eventually("second bound after amd-v2 said v4", || {
        node_of(&server, "second").as_deref() == Some("amd-v2")
    })
    .await;
    runtime.shutdown().await.unwrap();
}

/// A node labelled by node-feature-discovery's CPUID flags (NFD's default configuration,
/// which publishes AVX2 but hides BMI2) and not by multiarch: its level is read from them.
fn amd64_with_nfd_flags(name: &str, flags: &[&str]) -> Value {
    let mut node = node(name, "amd64", "4");
    for flag in flags {
        node["metadata"]["labels"][format!("{NFD_CPUID_PREFIX}{flag}")] = "true".into();
    }
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_feature_discoverys_cpuid_labels_give_the_level_of_an_unlabelled_node() {
    let server = FakeApiServer::start().await;
    // Haswell as NFD labels it by default: v3. A CPU without AVX2 (Westmere): v2.
    let v3_flags = [
        "CMPXCHG8", "LAHF", "AVX", "AVX2", "FMA3", "MOVBE", "OSXSAVE", "AESNI",
    ];
    server.apply(
        "nodes",
        amd64_with_nfd_flags("nfd-v2", &["CMPXCHG8", "LAHF", "AESNI"]),
    );
    server.apply("nodes", amd64_with_nfd_flags("nfd-v3", &v3_flags));
    server.apply("pods", pod("first", "ubi10:1", "3"));

    let runtime = start(&server, "a", false);
    eventually("first bound", || node_of(&server, "first").is_some()).await;
    assert_eq!(node_of(&server, "first").as_deref(), Some("nfd-v3"));

    server.apply("pods", pod("second", "ubi10:1", "3"));
    eventually("FailedScheduling for second", || {
        !events_for(&server, "second").is_empty()
    })
    .await;
    let note = events_for(&server, "second")[0]["note"].clone();
    assert!(
        note.as_str()
            .unwrap()
            .contains("1 Insufficient cpu, 1 node(s) are below x86-64-v3 needed by image ubi10:1"),
        "{note}"
    );
    // multiarch's own label, where the node has it, is what counts.
    let mut relabelled = server.get("nodes", "", "nfd-v2").unwrap();
    relabelled["metadata"]["labels"][NODE_VARIANT_LABEL] = "v3".into();
    server.apply("nodes", relabelled);
    eventually("second bound after nfd-v2 said v3", || {
        node_of(&server, "second").as_deref() == Some("nfd-v2")
    })
    .await;
    runtime.shutdown().await.unwrap();
}

/// `binaryInspection.unknownNodeLevel`: with `Baseline` an amd64 node whose level nothing
/// says is refused by name for an x86-64-v3 image; back to `AnyLevel`, the waiting pod
/// is placed there (a configuration change requeues it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_unknown_level_is_the_baseline_when_so_configured() {
    let server = FakeApiServer::start().await;
    let unknown_means = |meaning: &str| {
        serde_json::json!({"metadata": {"name": "cluster"}, "spec": {"plugins": {
            "binaryInspection": {"enabled": true, "unknownNodeLevel": meaning}}}})
    };
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        unknown_means("Baseline"),
    );
    server.apply("nodes", node("silent", "amd64", "4"));
    server.apply("nodes", amd64_of_level("amd-v3", "v3"));
    server.apply("pods", pod("first", "ubi10:1", "3"));

    let runtime = start(&server, "a", false);
    eventually("first bound", || node_of(&server, "first").is_some()).await;
    assert_eq!(node_of(&server, "first").as_deref(), Some("amd-v3"));

    server.apply("pods", pod("second", "ubi10:1", "3"));
    eventually("FailedScheduling for second", || {
        !events_for(&server, "second").is_empty()
    })
    .await;
    let note = events_for(&server, "second")[0]["note"].clone();
    assert!(
        note.as_str().unwrap().starts_with(
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) do not say their x86-64 level, taken as x86-64-v1 (unknownNodeLevel: Baseline), below x86-64-v3 needed by image ubi10:1."
        ),
        "{note}"
    );

    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        unknown_means("AnyLevel"),
    );
    eventually("second bound on the silent node", || {
        node_of(&server, "second").as_deref() == Some("silent")
    })
    .await;
    runtime.shutdown().await.unwrap();
}
