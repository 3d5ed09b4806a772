//! The constraint the webhook writes at admission (`multiarch_policy::arch_constraint`)
//! and the scheduler's own image filter agree on every node: a pod that carries it is
//! placed exactly as one that does not, whatever a node of unknown level is taken to run.

use k8s_openapi::api::core::v1::Pod;
use multiarch_policy::{arch_constraint::constrain, platform::Platform};
use serde_json::json;

use crate::{
    framework::{CycleState, FilterPlugin, PreFilterPlugin},
    image_platforms::{ContainerImagePlatforms, ImagePlatforms, PodImagePlatforms},
    model::{node::NodeBuilder, pod::PodInfo},
    plugins::{image_architecture::ImageArchitecture, node_affinity::NodeAffinity},
    testing::Fixture,
};
use multiarch_crd::{UnknownNodeLevel, names::NODE_VARIANT_LABEL};

fn pod() -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}))
    .unwrap()
}

#[test]
fn the_written_constraint_and_the_image_filter_agree_on_every_node() {
    let nodes = [
        NodeBuilder::new("amd", "amd64").info(),
        NodeBuilder::new("arm", "arm64").info(),
        NodeBuilder::new("z", "s390x").info(),
        NodeBuilder::new("p", "ppc64le").info(),
        NodeBuilder::new("pi6", "arm")
            .label(NODE_VARIANT_LABEL, "v6")
            .info(),
        NodeBuilder::new("pi7", "arm")
            .label(NODE_VARIANT_LABEL, "v7")
            .info(),
        NodeBuilder::new("arm32", "arm").info(),
        NodeBuilder::new("x86-v2", "amd64")
            .label(NODE_VARIANT_LABEL, "v2")
            .info(),
        NodeBuilder::new("x86-v3", "amd64")
            .label(NODE_VARIANT_LABEL, "v3")
            .info(),
        NodeBuilder::new("x86-v4", "amd64")
            .label(NODE_VARIANT_LABEL, "v4")
            .info(),
    ];
    let arm7 = Platform::new("linux", "arm", Some("v7"));
    let x86_v3 = Platform::new("linux", "amd64", Some("v3"));
    let cases: Vec<Vec<Platform>> = vec![
        vec![Platform::linux("amd64"), Platform::linux("arm64")],
        vec![Platform::linux("s390x")],
        vec![arm7.clone()],
        vec![arm7.clone(), Platform::linux("amd64")],
        vec![x86_v3.clone()],
        vec![x86_v3, arm7, Platform::linux("arm64")],
        vec![],
    ];
    let every_meaning = [UnknownNodeLevel::AnyLevel, UnknownNodeLevel::Baseline];
    for (platforms, unknown) in cases
        .iter()
        .flat_map(|p| every_meaning.map(|unknown| (p.clone(), unknown)))
    {
        let mut constrained = pod();
        constrain(&mut constrained, &platforms, unknown);
        let mut fixture = Fixture::new(PodInfo::from_pod(&constrained).unwrap());
        fixture.unknown_node_level = unknown;
        fixture.images = PodImagePlatforms {
            containers: vec![ContainerImagePlatforms {
                container: "c".into(),
                image: "i".into(),
                platforms: ImagePlatforms::Known(platforms.clone().into()),
                left_out: None,
            }],
        };
        let ctx = fixture.ctx();
        let mut state = CycleState::new();
        let image_pre = ImageArchitecture.pre_filter(&ctx, &mut state);
        let mut affinity_state = CycleState::new();
        let _ = NodeAffinity.pre_filter(&ctx, &mut affinity_state);
        for node in &nodes {
            let by_images =
                image_pre.is_success() && ImageArchitecture.filter(&ctx, &state, node).is_success();
            let by_affinity = NodeAffinity
                .filter(&ctx, &affinity_state, node)
                .is_success();
            assert_eq!(
                by_images, by_affinity,
                "{platforms:?} on {} ({unknown:?})",
                node.name
            );
        }
    }
}
