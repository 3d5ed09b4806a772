//! A `celArchitecturePlacement` decision against the pod's images: obeyed, and said.

use multiarch_plugins::{
    architecture_rules::ArchitectureDecision,
    image_platforms::{ImagePlatforms, PodImagePlatforms},
    model::platform::{ContainerPlatforms, compatible_platforms},
};

use super::scheduler::Outcome;

/// A rule-governed pod whose images have no build on the architectures the rule gave it:
/// obeyed, and said (event `ArchitectureRuleOverridesImages`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleOverride {
    pub message: String,
}

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

impl Outcome {
    /// The outcome with the rule that decided the pod's architectures, and the override
    /// to report.
    pub(crate) fn with_architecture_rule(
        mut self,
        rule: Option<ArchitectureDecision>,
        overrides: Option<RuleOverride>,
    ) -> Self {
        if let Outcome::Scheduled {
            architecture_rule,
            rule_override,
            ..
        }
        | Outcome::Failed {
            architecture_rule,
            rule_override,
            ..
        } = &mut self
        {
            *architecture_rule = rule;
            *rule_override = overrides;
        }
        self
    }
}
