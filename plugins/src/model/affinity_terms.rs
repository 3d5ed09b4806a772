//! The pod-affinity terms of the pods on the nodes, counted per term and topology domain.
//!
//! A pod without terms of its own must still respect the required anti-affinity of the
//! pods already placed, and is scored by their terms toward it. kube-scheduler walks the
//! nodes holding such pods and every pod on them, each cycle. Here the terms are counted
//! as pods come and go: a cycle asks each distinct term once whether it selects the pod
//! (the pods of one controller share their terms, so there are far fewer terms than
//! pods), and reads its counts per domain. Kept in step with each pod placed or removed
//! and each node added, removed or relabelled, at the cost of that change.

use rustc_hash::FxHashMap;

use super::pod::{PodAffinityTerm, PodInfo};
use multiarch_policy::selectors::LabelLookup;

/// Per topology value (of the term's key, on the nodes of the counted pods): the amount
/// and how many pods gave it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Domains(FxHashMap<String, (i64, u32)>);

impl Domains {
    /// Topology values with their amounts.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> {
        self.0
            .iter()
            .map(|(value, (amount, _))| (value.as_str(), *amount))
    }
}

type ByTerm = FxHashMap<PodAffinityTerm, Domains>;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AffinityTerms {
    /// Required anti-affinity terms: pods per domain.
    required_anti: ByTerm,
    /// Required affinity terms: pods per domain.
    required_affinity: ByTerm,
    /// Preferred terms: affinity weights less anti-affinity weights, per domain.
    preferred: ByTerm,
}

/// Adds `amount` from one pod (`placed`) or takes it back.
fn count(
    by_term: &mut ByTerm,
    term: &PodAffinityTerm,
    node: &impl LabelLookup,
    amount: i64,
    placed: bool,
) {
    let Some(value) = node.label_value(&term.topology_key) else {
        return;
    };
    if placed {
        let domain = by_term
            .entry(term.clone())
            .or_default()
            .0
            .entry(value.to_owned())
            .or_default();
        domain.0 += amount;
        domain.1 += 1;
        return;
    }
    let Some(domains) = by_term.get_mut(term) else {
        return;
    };
    if let Some(domain) = domains.0.get_mut(value) {
        domain.0 -= amount;
        domain.1 = domain.1.saturating_sub(1);
        if domain.1 == 0 {
            domains.0.remove(value);
        }
    }
    if domains.0.is_empty() {
        by_term.remove(term);
    }
}

impl AffinityTerms {
    /// Counts the terms of `pod`, placed on a node labelled `node` (`placed`), or stops
    /// counting them.
    pub fn count(&mut self, pod: &PodInfo, node: &impl LabelLookup, placed: bool) {
        if !pod.has_pod_affinity() {
            return;
        }
        for term in &pod.anti_affinity.required {
            count(&mut self.required_anti, term, node, 1, placed);
        }
        for term in &pod.affinity.required {
            count(&mut self.required_affinity, term, node, 1, placed);
        }
        for (weight, term) in &pod.affinity.preferred {
            count(&mut self.preferred, term, node, i64::from(*weight), placed);
        }
        for (weight, term) in &pod.anti_affinity.preferred {
            count(&mut self.preferred, term, node, -i64::from(*weight), placed);
        }
    }

    /// Required anti-affinity terms, with the pods holding them per domain.
    pub fn required_anti_affinity(&self) -> impl Iterator<Item = (&PodAffinityTerm, &Domains)> {
        self.required_anti.iter()
    }

    /// Required affinity terms, with the pods holding them per domain.
    pub fn required_affinity(&self) -> impl Iterator<Item = (&PodAffinityTerm, &Domains)> {
        self.required_affinity.iter()
    }

    /// Preferred terms, with their summed weights per domain (anti-affinity negative).
    pub fn preferred(&self) -> impl Iterator<Item = (&PodAffinityTerm, &Domains)> {
        self.preferred.iter()
    }
}
