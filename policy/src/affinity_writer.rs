//! The gate path's node-affinity writer, with MTO's merge rules (reference §2.5-2.8), so
//! that the gate controller and the scheduler share one definition of "compatible":
//! the required `kubernetes.io/arch` requirement is ANDed into every required term that
//! does not already constrain the architecture (terms are ORed, so each keeps its
//! meaning), and preferred architecture terms are appended in preference order.

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PreferredSchedulingTerm,
};
use multiarch_crd::UnknownNodeLevel;
use multiarch_crd::names::NODE_ARCH_LABEL;

use multiarch_crd::names::NODE_VARIANT_LABEL;

use crate::{
    node_level::x86_64_level_alternatives,
    platform::{Platform, variants_are_levels},
    preferences::ArchPreference,
};
use multiarch_crd::names::{NO_SUPPORTED_ARCH, NODE_OS_LABEL};

/// What the required affinity must say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArchRequirement {
    /// `kubernetes.io/arch In [...]`, sorted.
    In(Vec<String>),
    /// No architecture in common: `multiarch.openshift.io/no-supported-arch Exists`.
    NoSupportedArch,
}

impl ArchRequirement {
    /// From the pod's compatible platforms (the shared compatibility function's result).
    pub fn from_platforms(platforms: &[Platform]) -> Self {
        let mut archs: Vec<String> = platforms.iter().map(|p| p.architecture.clone()).collect();
        archs.sort();
        archs.dedup();
        if archs.is_empty() {
            ArchRequirement::NoSupportedArch
        } else {
            ArchRequirement::In(archs)
        }
    }

    fn requirement(&self) -> NodeSelectorRequirement {
        match self {
            ArchRequirement::In(archs) => NodeSelectorRequirement {
                key: NODE_ARCH_LABEL.into(),
                operator: "In".into(),
                values: Some(archs.clone()),
            },
            ArchRequirement::NoSupportedArch => NodeSelectorRequirement {
                key: NO_SUPPORTED_ARCH.into(),
                operator: "Exists".into(),
                values: None,
            },
        }
    }
}

fn node_affinity(pod: &mut Pod) -> &mut NodeAffinity {
    pod.spec
        .get_or_insert_with(Default::default)
        .affinity
        .get_or_insert_with(Affinity::default)
        .node_affinity
        .get_or_insert_with(NodeAffinity::default)
}

/// The architecture is already required: a `nodeSelector` on it, or every required term
/// names it (vacuously true for an empty term list, as in MTO).
pub fn architecture_required(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    if spec
        .node_selector
        .as_ref()
        .is_some_and(|s| s.contains_key(NODE_ARCH_LABEL))
    {
        return true;
    }
    spec.affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|r| {
            r.node_selector_terms.iter().all(|t| {
                t.match_expressions
                    .iter()
                    .flatten()
                    .any(|e| e.key == NODE_ARCH_LABEL)
            })
        })
}

/// Architectures the pod's own preferred terms already name.
pub fn preferred_architectures(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .flat_map(|t| t.preference.match_expressions.iter().flatten())
        .filter(|e| e.key == NODE_ARCH_LABEL)
        .flat_map(|e| e.values.clone().unwrap_or_default())
        .collect()
}

/// ANDs the requirement into every required term that lacks its key; creates the
/// required selector (one term) when there is none or it has no term.
pub fn merge_required(pod: &mut Pod, requirement: &ArchRequirement) {
    merge_expression(pod, &requirement.requirement());
}

/// What a node's variant label must say for a build of `arch` with `variant` to run there,
/// as alternatives (ORed) of expressions (ANDed). The scheduler's rule: a node without the
/// label runs any variant; where variants are levels (32-bit arm, x86-64) a node runs its
/// own and lower levels; elsewhere the variant must be the same. An amd64 node without the
/// label is read by node-feature-discovery's CPUID flags where it has them
/// ([`x86_64_level_alternatives`]), as the scheduler reads it.
fn variant_alternatives(
    arch: &str,
    variant: &str,
    unknown: UnknownNodeLevel,
) -> Vec<Vec<NodeSelectorRequirement>> {
    let expression = |operator: &str, values: Option<Vec<String>>| NodeSelectorRequirement {
        key: NODE_VARIANT_LABEL.into(),
        operator: operator.into(),
        values,
    };
    let level = variant
        .strip_prefix('v')
        .and_then(|n| n.parse::<u32>().ok());
    match level {
        Some(level) if arch == "amd64" => x86_64_level_alternatives(level, unknown),
        Some(level) if variants_are_levels(arch) => {
            let older: Vec<String> = (1..level).map(|l| format!("v{l}")).collect();
            if older.is_empty() {
                Vec::new()
            } else {
                vec![vec![expression("NotIn", Some(older))]]
            }
        }
        _ => vec![
            vec![expression("DoesNotExist", None)],
            vec![expression("In", Some(vec![variant.to_owned()]))],
        ],
    }
}

/// Like [`merge_required`], and the CPU variants the builds need (arm/v7 cannot run on an
/// arm/v6 node). Without variant needs the result is exactly `merge_required`'s; with them,
/// each term that gets the architecture is split per architecture (terms are ORed, so the
/// split keeps its meaning) and the variant expressions join that architecture's term.
/// `unknown`: what an amd64 node of unknown level runs.
pub fn merge_required_for(
    pod: &mut Pod,
    requirement: &ArchRequirement,
    platforms: &[Platform],
    unknown: UnknownNodeLevel,
) {
    let ArchRequirement::In(archs) = requirement else {
        return merge_required(pod, requirement);
    };
    let needs: Vec<(&String, Vec<Vec<NodeSelectorRequirement>>)> = archs
        .iter()
        .filter_map(|arch| {
            let mut builds = platforms.iter().filter(|p| &p.architecture == arch);
            // A build without a variant runs on every node of the architecture.
            let variant = builds.next()?.variant.as_deref()?;
            if builds.any(|p| p.variant.is_none()) {
                return None;
            }
            let alternatives = variant_alternatives(arch, variant, unknown);
            (!alternatives.is_empty()).then_some((arch, alternatives))
        })
        .collect();
    if needs.is_empty() {
        return merge_required(pod, requirement);
    }
    let plain: Vec<String> = archs
        .iter()
        .filter(|a| !needs.iter().any(|(n, _)| n == a))
        .cloned()
        .collect();
    let arch_in = |values: Vec<String>| NodeSelectorRequirement {
        key: NODE_ARCH_LABEL.into(),
        operator: "In".into(),
        values: Some(values),
    };
    let required = required_terms_mut(pod);
    let mut terms = Vec::new();
    for term in std::mem::take(required) {
        let expressions = term.match_expressions.clone().unwrap_or_default();
        if expressions.iter().any(|e| e.key == NODE_ARCH_LABEL) {
            terms.push(term);
            continue;
        }
        let with = |extra: Vec<NodeSelectorRequirement>| {
            let mut split = term.clone();
            split.match_expressions = Some(expressions.iter().cloned().chain(extra).collect());
            split
        };
        if !plain.is_empty() {
            terms.push(with(vec![arch_in(plain.clone())]));
        }
        for (arch, alternatives) in &needs {
            for alternative in alternatives {
                let mut extra = vec![arch_in(vec![(*arch).clone()])];
                extra.extend(alternative.iter().cloned());
                terms.push(with(extra));
            }
        }
    }
    *required = terms;
}

/// The operating system every compatible platform shares, when there is exactly one. MTO
/// ignores the OS: a Windows-only build counted as a usable architecture on Linux nodes.
pub fn common_os(platforms: &[Platform]) -> Option<&str> {
    let (first, rest) = platforms.split_first()?;
    rest.iter()
        .all(|p| p.os == first.os)
        .then_some(first.os.as_str())
}

/// `kubernetes.io/os In [os]`, ANDed like the architecture into every required term that
/// does not already name the OS (call after [`merge_required`]).
pub fn merge_required_os(pod: &mut Pod, os: &str) {
    merge_expression(
        pod,
        &NodeSelectorRequirement {
            key: NODE_OS_LABEL.into(),
            operator: "In".into(),
            values: Some(vec![os.to_owned()]),
        },
    );
}

/// The required node selector's terms, created as one empty term when there are none
/// (an empty term list would match no node).
fn required_terms_mut(pod: &mut Pod) -> &mut Vec<NodeSelectorTerm> {
    let terms = &mut node_affinity(pod)
        .required_during_scheduling_ignored_during_execution
        .get_or_insert_with(NodeSelector::default)
        .node_selector_terms;
    if terms.is_empty() {
        terms.push(NodeSelectorTerm::default());
    }
    terms
}

fn merge_expression(pod: &mut Pod, wanted: &NodeSelectorRequirement) {
    for term in required_terms_mut(pod).iter_mut() {
        let expressions = term.match_expressions.get_or_insert_with(Vec::new);
        if !expressions.iter().any(|e| e.key == wanted.key) {
            expressions.push(wanted.clone());
        }
    }
}

/// Appends a preferred term per preference that is not skipped, after the pod's own
/// terms. Returns how many were added.
pub fn merge_preferred(pod: &mut Pod, preferences: &[ArchPreference]) -> usize {
    let preferred = node_affinity(pod)
        .preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new);
    let mut added = 0;
    for p in preferences.iter().filter(|p| !p.skipped) {
        preferred.push(PreferredSchedulingTerm {
            weight: p.weight,
            preference: NodeSelectorTerm {
                match_expressions: Some(vec![NodeSelectorRequirement {
                    key: NODE_ARCH_LABEL.into(),
                    operator: "In".into(),
                    values: Some(vec![p.architecture.clone()]),
                }]),
                match_fields: None,
            },
        });
        added += 1;
    }
    added
}

#[cfg(test)]
#[path = "affinity_writer_tests.rs"]
mod tests;
