//! A `celArchitecturePlacement` decision against the pod's images: obeyed, and said.

use multiarch_plugins::{
    architecture_rules::ArchitectureDecision,
    image_platforms::{ImagePlatforms, PodImagePlatforms},
    model::platform::{ContainerPlatforms, compatible_platforms},
};

use super::outcome::RuleOverride;

/// Whether the rule sends the pod where none of its known images has a build.
pub fn rule_override(
    rule: &ArchitectureDecision,
    images: &PodImagePlatforms,
) -> Option<RuleOverride> {
    let known: Vec<ContainerPlatforms<'_>> = images
        .containers
        .iter()
        .filter_map(|c| match &c.platforms {
            ImagePlatforms::Known(p) => Some(ContainerPlatforms {
                container: &c.container,
                platforms: p,
            }),
            ImagePlatforms::Anywhere | ImagePlatforms::Failed(_) => None,
        })
        .collect();
    if known.is_empty() {
        return None;
    }
    let platforms = compatible_platforms(&known);
    rule.overrides_images(&platforms)
        .map(|message| RuleOverride { message })
}
