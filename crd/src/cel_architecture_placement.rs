//! `celArchitecturePlacement`: a `PodPlacementConfig` plugin that decides a pod's
//! architectures by ordered CEL rules over the pod's metadata instead of by its images
//! (MTO's enhancement MTO-0005). Namespaced only: never part of the cluster config.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Architecture;

/// The most rules one config may hold (the design's limit).
pub const MAX_RULES: u32 = 1000;
/// The longest expression: 1,000 of them stay well inside an object's size limit.
pub const MAX_EXPRESSION_LENGTH: u32 = 1024;

/// Ordered rules over a pod's metadata: the first rule whose expression is true decides
/// the pod's architectures; when none is, `fallbackArchitectures` do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CelArchitecturePlacement {
    /// Whether the rules decide the architectures of the pods this config selects.
    pub enabled: bool,

    /// The architectures of a selected pod no rule matches: 1 to 4, each once.
    #[schemars(length(min = 1, max = 4))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub fallback_architectures: Vec<Architecture>,

    /// Evaluated in order; the first match decides. At most 1,000, names unique.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub rules: Vec<ArchitectureRule>,
}

/// One rule: when `expression` is true for a pod, its architectures are `architectures`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchitectureRule {
    /// Names the rule in events, annotations and `multiarch audit`: a DNS label.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,

    /// A CEL expression returning bool. `self` is the pod, of which only
    /// `self.metadata.name`, `.namespace`, `.labels` and `.annotations` may be read
    /// (labels and annotations are maps: `'app' in self.metadata.labels`,
    /// `self.metadata.labels['app'] == 'db'`). Checked when the config is written.
    #[schemars(length(min = 1, max = 1024))]
    pub expression: String,

    /// The architectures of the pods the rule matches: 1 to 4, each once.
    #[schemars(length(min = 1, max = 4))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub architectures: Vec<Architecture>,
}

impl CelArchitecturePlacement {
    /// The fallback architectures' names, in the order written.
    pub fn fallback_names(&self) -> Vec<String> {
        names(&self.fallback_architectures)
    }
}

impl ArchitectureRule {
    /// The rule's architectures' names, in the order written.
    pub fn architecture_names(&self) -> Vec<String> {
        names(&self.architectures)
    }
}

fn names(architectures: &[Architecture]) -> Vec<String> {
    architectures
        .iter()
        .map(|a| a.as_str().to_owned())
        .collect()
}
