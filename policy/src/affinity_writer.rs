//! The gate path's node-affinity writer, with MTO's merge rules (reference §2.5-2.8), so
//! that the gate controller and the scheduler share one definition of "compatible":
//! the required `kubernetes.io/arch` requirement is ANDed into every required term that
//! does not already constrain the architecture (terms are ORed, so each keeps its
//! meaning), and preferred architecture terms are appended in preference order.

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    PreferredSchedulingTerm,
};
use multiarch_crd::names::NODE_ARCH_LABEL;

use multiarch_crd::names::NODE_VARIANT_LABEL;

use crate::{
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
/// own and lower levels; elsewhere the variant must be the same.
fn variant_alternatives(arch: &str, variant: &str) -> Vec<Vec<NodeSelectorRequirement>> {
    let expression = |operator: &str, values: Option<Vec<String>>| NodeSelectorRequirement {
        key: NODE_VARIANT_LABEL.into(),
        operator: operator.into(),
        values,
    };
    let level = variant
        .strip_prefix('v')
        .and_then(|n| n.parse::<u32>().ok());
    match level {
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
pub fn merge_required_for(pod: &mut Pod, requirement: &ArchRequirement, platforms: &[Platform]) {
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
            let alternatives = variant_alternatives(arch, variant);
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
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn pod(affinity: Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [], "affinity": affinity}}),
        )
        .unwrap()
    }

    fn required_terms(pod: &Pod) -> Value {
        serde_json::to_value(
            &pod.spec
                .as_ref()
                .unwrap()
                .affinity
                .as_ref()
                .unwrap()
                .node_affinity
                .as_ref()
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()
                .node_selector_terms,
        )
        .unwrap()
    }

    fn arch(values: &[&str]) -> Value {
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": values})
    }

    /// MTO's pod_model_test TestPod_setArchNodeAffinity cases.
    #[test]
    fn required_requirement_is_anded_into_each_term_without_one() {
        let requirement = ArchRequirement::In(vec!["amd64".into(), "arm64".into()]);
        let zone = json!({"key": "zone", "operator": "In", "values": ["a"]});
        let disk = json!({"key": "disk", "operator": "Exists"});
        let cases: Vec<(&str, Value, Value)> = vec![
            (
                "no affinity",
                Value::Null,
                json!([{"matchExpressions": [arch(&["amd64", "arm64"])]}]),
            ),
            (
                "empty terms",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}),
                json!([{"matchExpressions": [arch(&["amd64", "arm64"])]}]),
            ),
            (
                "term without expressions",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}),
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}], "matchExpressions": [arch(&["amd64", "arm64"])]}]),
            ),
            (
                "two non-arch terms",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [zone.clone()]}, {"matchExpressions": [disk.clone()]}]}}}),
                json!([{"matchExpressions": [zone.clone(), arch(&["amd64", "arm64"])]}, {"matchExpressions": [disk.clone(), arch(&["amd64", "arm64"])]}]),
            ),
            (
                "one arch term and one other",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [arch(&["s390x"])]}, {"matchExpressions": [zone.clone()]}]}}}),
                json!([{"matchExpressions": [arch(&["s390x"])]}, {"matchExpressions": [zone.clone(), arch(&["amd64", "arm64"])]}]),
            ),
        ];
        for (name, affinity, want) in cases {
            let mut p = pod(affinity);
            merge_required(&mut p, &requirement);
            let got = required_terms(&p);
            // Compare ignoring the order of keys inside terms.
            let norm = |v: &Value| {
                serde_json::to_string(
                    &serde_json::from_value::<Vec<NodeSelectorTerm>>(v.clone()).unwrap(),
                )
                .unwrap()
            };
            assert_eq!(norm(&got), norm(&want), "{name}");
        }
    }

    #[test]
    fn variant_needs_split_terms_per_architecture() {
        let variant = |op: &str, values: Option<&[&str]>| match values {
            Some(v) => {
                json!({"key": "multiarch.openshift.io/arch-variant", "operator": op, "values": v})
            }
            None => json!({"key": "multiarch.openshift.io/arch-variant", "operator": op}),
        };
        let zone = json!({"key": "zone", "operator": "In", "values": ["a"]});
        let arm_v7 = Platform::new("linux", "arm", Some("v7"));
        let cases: Vec<(&str, Value, Vec<Platform>, Value)> = vec![
            (
                "no variant: the same as merge_required",
                Value::Null,
                vec![Platform::linux("amd64"), Platform::linux("arm64")],
                json!([{"matchExpressions": [arch(&["amd64", "arm64"])]}]),
            ),
            (
                "arm/v7 only: v1-v6 nodes excluded, unlabelled nodes kept",
                Value::Null,
                vec![arm_v7.clone()],
                json!([{"matchExpressions": [arch(&["arm"]), variant("NotIn", Some(&["v1", "v2", "v3", "v4", "v5", "v6"]))]}]),
            ),
            (
                "amd64 or arm/v7, in a user's term",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [zone.clone()]}]}}}),
                vec![Platform::linux("amd64"), arm_v7.clone()],
                json!([
                    {"matchExpressions": [zone.clone(), arch(&["amd64"])]},
                    {"matchExpressions": [zone.clone(), arch(&["arm"]), variant("NotIn", Some(&["v1", "v2", "v3", "v4", "v5", "v6"]))]},
                ]),
            ),
            (
                "x86-64-v3 or arm64: v1 and v2 nodes excluded, unlabelled amd64 nodes kept",
                Value::Null,
                vec![
                    Platform::new("linux", "amd64", Some("v3")),
                    Platform::linux("arm64"),
                ],
                json!([
                    {"matchExpressions": [arch(&["arm64"])]},
                    {"matchExpressions": [arch(&["amd64"]), variant("NotIn", Some(&["v1", "v2"]))]},
                ]),
            ),
            (
                "another architecture's variant must match exactly, or the node not say",
                Value::Null,
                vec![Platform::new("linux", "riscv64", Some("rva23"))],
                json!([
                    {"matchExpressions": [arch(&["riscv64"]), variant("DoesNotExist", None)]},
                    {"matchExpressions": [arch(&["riscv64"]), variant("In", Some(&["rva23"]))]},
                ]),
            ),
            (
                "a term that already names the architecture is left alone",
                json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [arch(&["arm"])]}]}}}),
                vec![arm_v7.clone()],
                json!([{"matchExpressions": [arch(&["arm"])]}]),
            ),
        ];
        for (name, affinity, platforms, want) in cases {
            let mut p = pod(affinity);
            merge_required_for(
                &mut p,
                &ArchRequirement::from_platforms(&platforms),
                &platforms,
            );
            assert_eq!(required_terms(&p), want, "{name}");
        }
    }

    #[test]
    fn a_single_common_os_is_required_too() {
        assert_eq!(
            common_os(&[Platform::linux("amd64"), Platform::linux("arm64")]),
            Some("linux")
        );
        assert_eq!(
            common_os(&[
                Platform::linux("amd64"),
                Platform::new("windows", "amd64", None)
            ]),
            None
        );
        assert_eq!(common_os(&[]), None);
        let os = json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]});
        let users_os = json!({"key": "kubernetes.io/os", "operator": "In", "values": ["windows"]});
        let zone = json!({"key": "zone", "operator": "In", "values": ["a"]});
        let mut p = pod(
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [zone.clone()]}, {"matchExpressions": [users_os.clone()]}]}}}),
        );
        merge_required(&mut p, &ArchRequirement::In(vec!["arm64".into()]));
        merge_required_os(&mut p, "linux");
        assert_eq!(
            required_terms(&p),
            json!([
                {"matchExpressions": [zone, arch(&["arm64"]), os]},
                {"matchExpressions": [users_os, arch(&["arm64"])]},
            ]),
            "the user's own OS term is kept as it is"
        );
    }

    #[test]
    fn no_common_architecture_requires_a_label_no_node_has() {
        let mut p = pod(Value::Null);
        merge_required(&mut p, &ArchRequirement::from_platforms(&[]));
        assert_eq!(
            required_terms(&p),
            json!([{"matchExpressions": [{"key": NO_SUPPORTED_ARCH, "operator": "Exists"}]}])
        );
        assert_eq!(
            ArchRequirement::from_platforms(&[
                Platform::linux("arm64"),
                Platform::linux("amd64"),
                Platform::new("linux", "arm64", Some("v9"))
            ]),
            ArchRequirement::In(vec!["amd64".into(), "arm64".into()])
        );
    }

    #[test]
    fn architecture_already_required_by_selector_or_every_term() {
        let mut by_selector = pod(Value::Null);
        by_selector.spec.as_mut().unwrap().node_selector =
            Some([("kubernetes.io/arch".to_owned(), "arm64".to_owned())].into());
        assert!(architecture_required(&by_selector));
        assert!(!architecture_required(&pod(Value::Null)));
        let all = pod(
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [arch(&["amd64"])]}]}}}),
        );
        assert!(architecture_required(&all));
        let some = pod(
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [arch(&["amd64"])]}, {"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}}}),
        );
        assert!(!architecture_required(&some));
    }

    #[test]
    fn preferred_terms_are_appended_after_the_users_own() {
        let mut p = pod(
            json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}),
        );
        let prefs = vec![
            ArchPreference {
                architecture: "arm64".into(),
                weight: 80,
                source: "PodPlacementConfig-a".into(),
                skipped: false,
            },
            ArchPreference {
                architecture: "arm64".into(),
                weight: 10,
                source: "ClusterPodPlacementConfig".into(),
                skipped: true,
            },
            ArchPreference {
                architecture: "amd64".into(),
                weight: 20,
                source: "ClusterPodPlacementConfig".into(),
                skipped: false,
            },
        ];
        assert_eq!(merge_preferred(&mut p, &prefs), 2);
        let preferred = p
            .spec
            .unwrap()
            .affinity
            .unwrap()
            .node_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        let summary: Vec<(i32, String)> = preferred
            .iter()
            .map(|t| {
                (
                    t.weight,
                    t.preference.match_expressions.as_ref().unwrap()[0]
                        .values
                        .clone()
                        .unwrap_or_default()
                        .join(","),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (5, "a".to_owned()),
                (80, "arm64".to_owned()),
                (20, "amd64".to_owned())
            ]
        );
        let with_own = pod(
            json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": [arch(&["s390x"])]}}]}}),
        );
        assert_eq!(preferred_architectures(&with_own), ["s390x"]);
    }
}
