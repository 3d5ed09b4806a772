//! A `celArchitecturePlacement` decision against the pod's images: obeyed, and said.

use multiarch_plugins::image_platforms::PodImagePlatforms;
use multiarch_policy::architecture_rules::ArchitectureDecision;
use multiarch_policy::platform::compatible_platforms;

use super::outcome::RuleOverride;

/// Whether the rule sends the pod where none of its known images has a build.
pub fn rule_override(
    rule: &ArchitectureDecision,
    images: &PodImagePlatforms,
) -> Option<RuleOverride> {
    let known = images.known();
    if known.is_empty() {
        return None;
    }
    let platforms = compatible_platforms(&known);
    rule.overrides_images(&platforms)
        .map(|message| RuleOverride { message })
}
