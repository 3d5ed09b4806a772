//! ImageArchitecture's table tests.

use super::*;
use crate::{
    framework::Code,
    image_platforms::{ContainerImagePlatforms, PodImagePlatforms},
    model::{node::NodeBuilder, pod::PodBuilder},
    testing::{Fixture, known},
};
use multiarch_crd::names::NODE_VARIANT_LABEL;

fn fixture(images: Vec<(&str, ImagePlatforms)>) -> Fixture {
    let mut fixture = Fixture::new(PodBuilder::new("ns", "p").info());
    fixture.images = PodImagePlatforms {
        containers: images
            .into_iter()
            .enumerate()
            .map(|(i, (image, platforms))| ContainerImagePlatforms {
                container: format!("c{i}"),
                image: image.into(),
                platforms,
                left_out: None,
            })
            .collect(),
    };
    fixture
}

#[test]
fn filters_nodes_by_the_intersection_of_all_images() {
    let f = fixture(vec![
        ("multi", known(&["amd64", "arm64", "s390x"])),
        ("sidecar", known(&["amd64", "arm64"])),
    ]);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    let arm = NodeBuilder::new("arm", "arm64").info();
    let z = NodeBuilder::new("z", "s390x").info();
    assert!(ImageArchitecture.filter(&ctx, &state, &arm).is_success());
    let status = ImageArchitecture.filter(&ctx, &state, &z);
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        status.message(),
        "node(s) didn't match the pod's image architectures (images support amd64, arm64)"
    );
}

#[test]
fn nodes_below_the_x86_64_level_an_image_needs_are_refused_by_name() {
    let f = fixture(vec![
        ("quay.io/ubi10:1", known(&["amd64/v3", "arm64"])),
        (
            "quay.io/sidecar:1",
            known(&["amd64/v2", "amd64/v3", "arm64"]),
        ),
    ]);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    let node = |name: &str, arch: &str, level: Option<&str>| {
        let mut b = NodeBuilder::new(name, arch);
        if let Some(level) = level {
            b = b.label(NODE_VARIANT_LABEL, level);
        }
        b.info()
    };
    let below = "node(s) are below x86-64-v3 needed by image quay.io/ubi10:1";
    let other =
        "node(s) didn't match the pod's image architectures (images support amd64/v3, arm64)";
    let cases = [
        (node("v2", "amd64", Some("v2")), Some(below)),
        (node("v1", "amd64", Some("v1")), Some(below)),
        (node("v3", "amd64", Some("v3")), None),
        (node("v4", "amd64", Some("v4")), None),
        // A node that does not say its level takes any build, as before the label.
        (node("unlabelled", "amd64", None), None),
        (node("arm", "arm64", None), None),
        (node("z", "s390x", None), Some(other)),
    ];
    for (node, refused) in cases {
        let status = ImageArchitecture.filter(&ctx, &state, &node);
        match refused {
            None => assert!(status.is_success(), "{}: {}", node.name, status.message()),
            Some(message) => {
                assert_eq!(
                    status.code,
                    Code::UnschedulableAndUnresolvable,
                    "{}",
                    node.name
                );
                assert_eq!(status.message(), message, "{}", node.name);
            }
        }
        // The platform index's bit test and the precise check agree.
        assert_eq!(
            state.read::<CompatiblePlatforms>().unwrap().admits(&node),
            refused.is_none(),
            "{}",
            node.name
        );
    }
    // With a baseline build beside, every amd64 node will do.
    let f = fixture(vec![("quay.io/app:1", known(&["amd64", "amd64/v3"]))]);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    assert!(
        ImageArchitecture
            .filter(&ctx, &state, &node("v1", "amd64", Some("v1")))
            .is_success()
    );
}

#[test]
fn no_common_architecture_is_unresolvable_and_names_each_image() {
    let f = fixture(vec![
        ("quay.io/a:1", known(&["amd64"])),
        ("quay.io/b:1", known(&["arm64"])),
    ]);
    let status = ImageArchitecture.pre_filter(&f.ctx(), &mut CycleState::new());
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        status.message(),
        "the pod's images have no architecture in common: c0 (quay.io/a:1) supports amd64; c1 (quay.io/b:1) supports arm64"
    );
}

#[test]
fn inspection_failure_waits_with_backoff_unless_a_fallback_is_set() {
    let mut f = fixture(vec![
        ("ok", known(&["amd64", "arm64"])),
        (
            "quay.io/private:1",
            ImagePlatforms::Failed("unauthorized at quay.io".into()),
        ),
    ]);
    let status = ImageArchitecture.pre_filter(&f.ctx(), &mut CycleState::new());
    assert_eq!(status.code, Code::Unschedulable);
    assert!(status.retry_with_backoff);
    assert_eq!(
        status.message(),
        "cannot read the platforms of the pod's images (image quay.io/private:1: unauthorized at quay.io); retrying with backoff"
    );

    f.fallback = Some("arm64".into());
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    assert!(state.read::<CompatiblePlatforms>().unwrap().fallback_used);
    assert!(
        ImageArchitecture
            .filter(&ctx, &state, &NodeBuilder::new("a", "arm64").info())
            .is_success()
    );
    assert!(
        !ImageArchitecture
            .filter(&ctx, &state, &NodeBuilder::new("b", "amd64").info())
            .is_success()
    );
}

#[test]
fn a_rules_architectures_replace_the_images_platforms() {
    // Images with no common build, and one that cannot be read: the rule decides.
    let mut f = fixture(vec![
        ("quay.io/a:1", known(&["amd64"])),
        ("quay.io/b:1", known(&["arm64"])),
        ("quay.io/c:1", ImagePlatforms::Failed("unauthorized".into())),
    ]);
    f.architecture_rule = Some(multiarch_policy::architecture_rules::ArchitectureDecision {
        config: "tiers".into(),
        rule: Some("db".into()),
        architectures: vec!["ppc64le".into(), "s390x".into()],
        errors: Vec::new(),
    });
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    let found = state.read::<CompatiblePlatforms>().unwrap();
    assert_eq!(
        found.decided_by.as_deref(),
        Some("rule \"db\" of PodPlacementConfig tiers")
    );
    let z = NodeBuilder::new("z", "s390x").info();
    assert!(ImageArchitecture.filter(&ctx, &state, &z).is_success());
    let status = ImageArchitecture.filter(&ctx, &state, &NodeBuilder::new("a", "amd64").info());
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        status.message(),
        "node(s) didn't match the architectures of rule \"db\" of PodPlacementConfig tiers (ppc64le, s390x)"
    );
}

#[test]
fn os_mismatch_filters_too() {
    let f = fixture(vec![(
        "windows-only",
        ImagePlatforms::Known(vec![Platform::new("windows", "amd64", None)].into()),
    )]);
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    let linux = NodeBuilder::new("l", "amd64").info();
    let windows = NodeBuilder::new("w", "amd64")
        .label("kubernetes.io/os", "windows")
        .info();
    assert!(!ImageArchitecture.filter(&ctx, &state, &linux).is_success());
    assert!(
        ImageArchitecture
            .filter(&ctx, &state, &windows)
            .is_success()
    );
}

#[test]
fn scores_by_weight_normalized_to_the_largest() {
    let mut f = fixture(vec![("multi", known(&["amd64", "arm64", "s390x"]))]);
    f.preferences = vec![("arm64".into(), 50), ("amd64".into(), 25)];
    let ctx = f.ctx();
    let state = CycleState::new();
    assert!(
        ImageArchitecture
            .pre_score(&ctx, &mut CycleState::new(), &[])
            .is_success()
    );
    let nodes = ["arm64", "amd64", "s390x"].map(|a| NodeBuilder::new(a, a).info());
    let mut scores: Vec<i64> = nodes
        .iter()
        .map(|n| ImageArchitecture.score(&ctx, &state, n))
        .collect();
    assert_eq!(scores, [50, 25, 0]);
    // The same through the table PreScore leaves (nodes with a platform bit).
    let mut scored = CycleState::new();
    assert!(
        ImageArchitecture
            .pre_score(&ctx, &mut scored, &[])
            .is_success()
    );
    let by_table: Vec<i64> = nodes
        .iter()
        .map(|n| ImageArchitecture.score(&ctx, &scored, n))
        .collect();
    assert_eq!(by_table, scores);
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    for state in [&state, &scored] {
        let mut all = vec![-7; nodes.len()];
        ImageArchitecture.score_all(&ctx, state, &refs, &mut all);
        assert_eq!(
            all, scores,
            "every node at once, with and without the table"
        );
    }
    ImageArchitecture.normalize(&ctx, &state, &mut scores);
    assert_eq!(scores, [100, 50, 0]);

    f.preferences.clear();
    assert_eq!(
        ImageArchitecture
            .pre_score(&f.ctx(), &mut CycleState::new(), &[])
            .code,
        Code::Skip
    );
}

#[test]
fn a_build_left_out_as_mislabelled_is_named_where_its_nodes_are_refused() {
    let left_out = "image quay.io/talos:1's arm64 build runs a program built for amd64 (/sbin/init): not counted as runnable";
    let mut f = fixture(vec![("quay.io/talos:1", known(&["amd64"]))]);
    f.images.containers[0].left_out = Some(left_out.into());
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    let amd = NodeBuilder::new("amd", "amd64").info();
    let arm = NodeBuilder::new("arm", "arm64").info();
    assert!(ImageArchitecture.filter(&ctx, &state, &amd).is_success());
    let status = ImageArchitecture.filter(&ctx, &state, &arm);
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        status.message(),
        format!(
            "node(s) didn't match the pod's image architectures (images support amd64) ({left_out})"
        )
    );
}

#[test]
fn an_image_whose_every_build_is_left_out_runs_nowhere_and_says_why() {
    let left_out = "image quay.io/bad:1's arm64 build runs a program built for amd64 (/app): not counted as runnable";
    let mut f = fixture(vec![("quay.io/bad:1", known(&[]))]);
    f.images.containers[0].left_out = Some(left_out.into());
    let ctx = f.ctx();
    let mut state = CycleState::new();
    let status = ImageArchitecture.pre_filter(&ctx, &mut state);
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        status.message(),
        format!(
            "the pod's images have no architecture in common: c0 (quay.io/bad:1) supports no platform ({left_out})"
        )
    );
}

#[test]
fn a_node_of_unknown_level_is_refused_by_name_when_taken_as_the_baseline() {
    let mut f = fixture(vec![("quay.io/ubi10:1", known(&["amd64/v3", "arm64"]))]);
    let silent = NodeBuilder::new("silent", "amd64").info();
    let v3 = NodeBuilder::new("v3", "amd64")
        .label(NODE_VARIANT_LABEL, "v3")
        .info();
    let arm = NodeBuilder::new("arm", "arm64").info();
    // By default a node that says nothing runs every level.
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    assert!(ImageArchitecture.filter(&ctx, &state, &silent).is_success());

    f.unknown_node_level = multiarch_crd::UnknownNodeLevel::Baseline;
    let ctx = f.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    let status = ImageArchitecture.filter(&ctx, &state, &silent);
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(
        status.message(),
        "node(s) do not say their x86-64 level, taken as x86-64-v1 (unknownNodeLevel: Baseline), below x86-64-v3 needed by image quay.io/ubi10:1"
    );
    assert!(ImageArchitecture.filter(&ctx, &state, &v3).is_success());
    // Other architectures' nodes that say nothing are not concerned.
    assert!(ImageArchitecture.filter(&ctx, &state, &arm).is_success());

    // An image that needs no level runs on the silent node either way.
    let mut plain = fixture(vec![("quay.io/app:1", known(&["amd64"]))]);
    plain.unknown_node_level = multiarch_crd::UnknownNodeLevel::Baseline;
    let ctx = plain.ctx();
    let mut state = CycleState::new();
    assert!(ImageArchitecture.pre_filter(&ctx, &mut state).is_success());
    assert!(ImageArchitecture.filter(&ctx, &state, &silent).is_success());
}
