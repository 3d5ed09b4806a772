//! The architecture constraint a pod gets from its images' compatible platforms, written
//! the same way by the gate controller (after inspection) and by the webhook (at
//! admission, when the platforms are known in time), so autoscalers and the default
//! scheduler read the same constraint the multiarch scheduler filters by.

use k8s_openapi::api::core::v1::Pod;
use multiarch_crd::{UnknownNodeLevel, names::NODE_ARCH_LABEL};

use crate::{
    affinity_writer::{
        ArchRequirement, architecture_required, common_os, merge_required, merge_required_for,
        merge_required_os,
    },
    platform::Platform,
};

/// What [`constrain`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constrained {
    /// `kubernetes.io/arch In [...]` (and the OS and variants when they matter).
    Architectures(Vec<String>),
    /// The images have no platform in common: a requirement no node meets.
    NoSupportedArch,
    /// The user's own architecture pin excludes every build: a requirement no node
    /// meets, so an autoscaler does not add a node for the pod.
    PinContradicted,
    /// The user pinned the architecture and a build runs there: left as it is.
    UserPinned,
}

/// The architectures the pod's own constraint allows, when it states them plainly: its
/// `nodeSelector` value, and the `In` values of required terms that all name the
/// architecture (ORed). `None` when it does not pin, or pins in a way not read here
/// (`NotIn`, `Exists`).
pub fn pinned_architectures(pod: &Pod) -> Option<Vec<String>> {
    if !architecture_required(pod) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let selector = spec
        .node_selector
        .as_ref()
        .and_then(|s| s.get(NODE_ARCH_LABEL))
        .cloned();
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.as_slice())
        .unwrap_or_default();
    let mut from_terms: Option<Vec<String>> = None;
    for term in terms {
        let mut allowed: Option<Vec<String>> = None;
        for expression in term.match_expressions.iter().flatten() {
            if expression.key != NODE_ARCH_LABEL {
                continue;
            }
            if expression.operator != "In" {
                return None;
            }
            let values = expression.values.clone().unwrap_or_default();
            allowed = Some(match allowed {
                None => values,
                Some(have) => have.into_iter().filter(|a| values.contains(a)).collect(),
            });
        }
        // A term without the architecture (possible only with a nodeSelector pin).
        let Some(allowed) = allowed else {
            continue;
        };
        from_terms.get_or_insert_with(Vec::new).extend(allowed);
    }
    let mut pinned = match (selector, from_terms) {
        (Some(arch), Some(terms)) => terms.into_iter().filter(|a| *a == arch).collect(),
        (Some(arch), None) => vec![arch],
        (None, Some(terms)) => terms,
        (None, None) => return None,
    };
    pinned.sort();
    pinned.dedup();
    Some(pinned)
}

/// Writes the required constraint for `platforms` (the pod's compatible platforms) into
/// the pod: MTO's merge rules (ANDed into every required term without an architecture,
/// terms split per variant need, the OS when every build shares one). A pod that pins the
/// architecture itself keeps its pin, unless the pin leaves no build to run. `unknown`:
/// what an amd64 node of unknown x86-64 level runs.
pub fn constrain(pod: &mut Pod, platforms: &[Platform], unknown: UnknownNodeLevel) -> Constrained {
    if architecture_required(pod) {
        let Some(pinned) = pinned_architectures(pod) else {
            return Constrained::UserPinned;
        };
        let runs = platforms.iter().any(|p| pinned.contains(&p.architecture));
        if runs {
            return Constrained::UserPinned;
        }
        merge_required(pod, &ArchRequirement::NoSupportedArch);
        return Constrained::PinContradicted;
    }
    let requirement = ArchRequirement::from_platforms(platforms);
    merge_required_for(pod, &requirement, platforms, unknown);
    if let Some(os) = common_os(platforms) {
        merge_required_os(pod, os);
    }
    match requirement {
        ArchRequirement::In(archs) => Constrained::Architectures(archs),
        ArchRequirement::NoSupportedArch => Constrained::NoSupportedArch,
    }
}

/// Replaces the pod's own architecture constraint with a rule's decision
/// (`celArchitecturePlacement`): the `kubernetes.io/arch` nodeSelector key and every
/// `kubernetes.io/arch` expression of the required terms go, preferred terms stay, and
/// `kubernetes.io/arch In [architectures]` is ANDed into every required term. Returns
/// whether the pod's own constraint was removed.
pub fn impose_rule(pod: &mut Pod, architectures: &[String]) -> bool {
    let mut removed = false;
    if let Some(spec) = pod.spec.as_mut() {
        if let Some(selector) = spec.node_selector.as_mut() {
            removed |= selector.remove(NODE_ARCH_LABEL).is_some();
        }
        let terms = spec
            .affinity
            .as_mut()
            .and_then(|a| a.node_affinity.as_mut())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_mut()
            })
            .map(|r| r.node_selector_terms.iter_mut());
        for term in terms.into_iter().flatten() {
            if let Some(expressions) = term.match_expressions.as_mut() {
                let before = expressions.len();
                expressions.retain(|e| e.key != NODE_ARCH_LABEL);
                removed |= expressions.len() != before;
            }
        }
    }
    let mut archs = architectures.to_vec();
    archs.sort();
    archs.dedup();
    merge_required(pod, &ArchRequirement::In(archs));
    removed
}

#[cfg(test)]
#[path = "arch_constraint_tests.rs"]
mod tests;
