//! A node's CPU variant as its labels say: multiarch's own label
//! (`multiarch.openshift.io/arch-variant`, written by the node daemon or by hand) where
//! the node has it, otherwise, on amd64, the x86-64 level node-feature-discovery's CPUID
//! labels show. Read by the scheduler's node model, the misplaced-pod correction and
//! `audit`, and written as node affinity by the webhook and the gate path
//! ([`x86_64_level_alternatives`]), so that every path judges a node alike. No I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use multiarch_crd::{UnknownNodeLevel, names::NODE_VARIANT_LABEL};

/// The prefix of node-feature-discovery's CPUID flag labels
/// (`feature.node.kubernetes.io/cpu-cpuid.AVX2=true`).
pub const NFD_CPUID_PREFIX: &str = "feature.node.kubernetes.io/cpu-cpuid.";

/// Each level's features beyond the one below, as node-feature-discovery names them (the
/// names of the cpuid library it reads CPUID with; the psABI's lists, as that library's
/// `X86Level` checks them). Level 1's features are every x86-64 CPU's.
const LEVEL_FEATURES: [&[&str]; 3] = [
    &["CX16", "LAHF", "POPCNT", "SSE3", "SSE4", "SSE42", "SSSE3"],
    &[
        "AVX", "AVX2", "BMI1", "BMI2", "F16C", "FMA3", "LZCNT", "MOVBE", "OSXSAVE",
    ],
    &["AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL"],
];

/// The flag whose label says the node's CPUID flags are read by node-feature-discovery:
/// CMPXCHG8 is every x86-64 CPU's and NFD publishes it by default. A node whose NFD is
/// configured to leave it out publishes a selection no level can be read from.
pub const NFD_MARKER_FLAG: &str = "CMPXCHG8";

/// The level features node-feature-discovery leaves out by default (its cpuid
/// `attributeBlacklist`: flags nearly every CPU has). Their absence says nothing unless the
/// node shows that its labels are not filtered so (one of them is there).
pub(crate) const HIDDEN_BY_DEFAULT: [&str; 10] = [
    "CX16", "POPCNT", "SSE3", "SSE4", "SSE42", "SSSE3", "BMI1", "BMI2", "F16C", "LZCNT",
];

/// The node's variant: its `multiarch.openshift.io/arch-variant` label, or for an amd64
/// node without it the x86-64 level node-feature-discovery's labels show (`v3`); `None`
/// when neither says (a node that says nothing runs every variant).
pub fn node_variant(labels: &BTreeMap<String, String>, architecture: &str) -> Option<String> {
    if let Some(variant) = labels.get(NODE_VARIANT_LABEL) {
        return Some(variant.clone());
    }
    (architecture == "amd64")
        .then(|| nfd_x86_64_level(labels))
        .flatten()
        .map(|level| format!("v{level}"))
}

/// The node's variant as placement judges it: [`node_variant`], and for an amd64 node
/// that says nothing, `v1` when unknown levels are taken as the baseline
/// (`binaryInspection.unknownNodeLevel: Baseline`).
pub fn judged_node_variant(
    labels: &BTreeMap<String, String>,
    architecture: &str,
    unknown: UnknownNodeLevel,
) -> Option<String> {
    node_variant(labels, architecture).or_else(|| {
        (architecture == "amd64" && unknown == UnknownNodeLevel::Baseline).then(|| "v1".into())
    })
}

/// The highest x86-64 level whose features node-feature-discovery's labels show, with
/// every level's below; `None` for a node without its CPUID labels ([`NFD_MARKER_FLAG`]
/// not labelled). A feature NFD hides by default counts as there unless the node's labels
/// show the hidden ones too (then the admin publishes every flag, and a missing one is
/// missing): so the level is never below what the CPU has, and is exactly it where NFD
/// publishes the full set.
pub fn nfd_x86_64_level(labels: &BTreeMap<String, String>) -> Option<u8> {
    let has = |feature: &str| {
        labels
            .get(&format!("{NFD_CPUID_PREFIX}{feature}"))
            .is_some_and(|value| value == "true")
    };
    if !has(NFD_MARKER_FLAG) {
        return None;
    }
    let every_flag_published = HIDDEN_BY_DEFAULT.iter().any(|feature| has(feature));
    let mut level = 1;
    for features in LEVEL_FEATURES {
        let offered = features.iter().all(|feature| {
            has(feature) || (!every_flag_published && HIDDEN_BY_DEFAULT.contains(feature))
        });
        if !offered {
            break;
        }
        level += 1;
    }
    Some(level)
}

/// What an amd64 node's labels must say for the node to be of x86-64 `level` or above, as
/// node-affinity alternatives (ORed terms of ANDed expressions), read exactly as
/// [`node_variant`] reads them, so that the affinity the webhook and the gate path write
/// and the scheduler agree on every node: multiarch's label at the level or above; or no
/// label and no NFD flags (a node that says nothing runs every level, unless `unknown`
/// takes it as the baseline); or no label and NFD's flags of every level up to it (the
/// default-hidden ones either all absent or needed like the others). Empty for level 1
/// and below: every x86-64 node runs those.
pub fn x86_64_level_alternatives(
    level: u32,
    unknown: UnknownNodeLevel,
) -> Vec<Vec<NodeSelectorRequirement>> {
    let expression =
        |key: String, operator: &str, values: Option<Vec<String>>| NodeSelectorRequirement {
            key,
            operator: operator.into(),
            values,
        };
    let flag = |feature: &str| format!("{NFD_CPUID_PREFIX}{feature}");
    let is_true = |feature: &str| expression(flag(feature), "In", Some(vec!["true".into()]));
    let not_true = |feature: &str| expression(flag(feature), "NotIn", Some(vec!["true".into()]));
    let older: Vec<String> = (1..level).map(|l| format!("v{l}")).collect();
    if older.is_empty() {
        return Vec::new();
    }
    let no_variant = || expression(NODE_VARIANT_LABEL.into(), "DoesNotExist", None);
    let mut alternatives = vec![vec![
        expression(NODE_VARIANT_LABEL.into(), "Exists", None),
        expression(NODE_VARIANT_LABEL.into(), "NotIn", Some(older)),
    ]];
    if unknown == UnknownNodeLevel::AnyLevel {
        alternatives.push(vec![no_variant(), not_true(NFD_MARKER_FLAG)]);
    }
    // Levels above the highest NFD's flags can show: no NFD node is of them.
    let Some(needed) = usize::try_from(level - 1)
        .ok()
        .and_then(|levels| LEVEL_FEATURES.get(..levels))
    else {
        return alternatives;
    };
    let needed: Vec<&str> = needed.iter().flat_map(|f| f.iter().copied()).collect();
    let mut default_filtered = vec![no_variant(), is_true(NFD_MARKER_FLAG)];
    default_filtered.extend(HIDDEN_BY_DEFAULT.iter().map(|f| not_true(f)));
    default_filtered.extend(
        needed
            .iter()
            .filter(|f| !HIDDEN_BY_DEFAULT.contains(f))
            .map(|f| is_true(f)),
    );
    let mut every_flag = vec![no_variant(), is_true(NFD_MARKER_FLAG)];
    every_flag.extend(needed.iter().map(|f| is_true(f)));
    alternatives.push(default_filtered);
    alternatives.push(every_flag);
    alternatives
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What NFD's default configuration publishes of each level (the hidden flags left out).
    const V2_DEFAULT: &[&str] = &["LAHF"];
    const V3_DEFAULT: &[&str] = &["AVX", "AVX2", "FMA3", "MOVBE", "OSXSAVE"];
    const V4: &[&str] = &["AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL"];
    /// The flags NFD hides by default, of v2 and v3.
    const V2_HIDDEN: &[&str] = &["CX16", "POPCNT", "SSE3", "SSE4", "SSE42", "SSSE3"];
    const V3_HIDDEN: &[&str] = &["BMI1", "BMI2", "F16C", "LZCNT"];

    fn labels(flag_sets: &[&[&str]], extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut labels: BTreeMap<String, String> = [&[NFD_MARKER_FLAG][..]]
            .iter()
            .chain(flag_sets)
            .flat_map(|set| set.iter())
            .map(|flag| (format!("{NFD_CPUID_PREFIX}{flag}"), "true".to_owned()))
            .collect();
        labels.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        labels
    }

    #[test]
    fn nfd_levels_by_default_configuration_and_by_every_flag_published() {
        /// A case's name, the node's NFD flags, the level they show.
        type Case<'a> = (&'a str, Vec<&'a [&'a str]>, Option<u8>);
        let cases: [Case; 9] = [
            ("only the marker", vec![], Some(1)),
            // An old CPU: NFD shows none of v2's visible flags.
            ("only flags of no level", vec![&["AESNI"]], Some(1)),
            ("v2 by default", vec![V2_DEFAULT], Some(2)),
            ("v3 by default", vec![V2_DEFAULT, V3_DEFAULT], Some(3)),
            ("v4 by default", vec![V2_DEFAULT, V3_DEFAULT, V4], Some(4)),
            // AVX-512 without AVX2 (no real CPU) stays at v2.
            ("v4's without v3's", vec![V2_DEFAULT, V4], Some(2)),
            // A virtual CPU without MOVBE (published by default) is v2, as glibc sees it.
            (
                "v3 but MOVBE",
                vec![V2_DEFAULT, &["AVX", "AVX2", "FMA3", "OSXSAVE"]],
                Some(2),
            ),
            // Every flag published: a hidden v3 flag missing (LZCNT) is missing.
            (
                "all flags, v3 without LZCNT",
                vec![V2_DEFAULT, V2_HIDDEN, V3_DEFAULT, &["BMI1", "BMI2", "F16C"]],
                Some(2),
            ),
            (
                "all flags, v4",
                vec![V2_DEFAULT, V2_HIDDEN, V3_DEFAULT, V3_HIDDEN, V4],
                Some(4),
            ),
        ];
        for (name, flags, want) in cases {
            assert_eq!(nfd_x86_64_level(&labels(&flags, &[])), want, "{name}");
        }
        assert_eq!(nfd_x86_64_level(&BTreeMap::new()), None, "no NFD labels");
    }

    #[test]
    fn flags_without_the_marker_are_a_selection_no_level_is_read_from() {
        let mut node = labels(&[V2_DEFAULT, V3_DEFAULT], &[]);
        node.remove(&format!("{NFD_CPUID_PREFIX}{NFD_MARKER_FLAG}"));
        assert_eq!(nfd_x86_64_level(&node), None);
    }

    #[test]
    fn a_flag_labelled_other_than_true_is_not_there() {
        let mut node = labels(&[V2_DEFAULT, V3_DEFAULT], &[]);
        node.insert(format!("{NFD_CPUID_PREFIX}AVX2"), "false".into());
        assert_eq!(nfd_x86_64_level(&node), Some(2));
    }

    #[test]
    fn the_own_label_comes_first_and_nfd_is_read_on_amd64_only() {
        let nfd_v3 = labels(&[V2_DEFAULT, V3_DEFAULT], &[]);
        assert_eq!(node_variant(&nfd_v3, "amd64").as_deref(), Some("v3"));
        let both = labels(&[V2_DEFAULT, V3_DEFAULT], &[(NODE_VARIANT_LABEL, "v2")]);
        assert_eq!(node_variant(&both, "amd64").as_deref(), Some("v2"));
        assert_eq!(node_variant(&nfd_v3, "arm64"), None);
        let arm = labels(&[], &[(NODE_VARIANT_LABEL, "v7")]);
        assert_eq!(node_variant(&arm, "arm").as_deref(), Some("v7"));
        assert_eq!(node_variant(&BTreeMap::new(), "amd64"), None);
    }

    #[test]
    fn a_node_that_says_nothing_is_the_baseline_only_when_so_configured() {
        use UnknownNodeLevel::{AnyLevel, Baseline};
        let silent = BTreeMap::new();
        assert_eq!(judged_node_variant(&silent, "amd64", AnyLevel), None);
        assert_eq!(
            judged_node_variant(&silent, "amd64", Baseline).as_deref(),
            Some("v1")
        );
        // Only x86-64 levels: an arm64 node that says nothing runs every build.
        assert_eq!(judged_node_variant(&silent, "arm64", Baseline), None);
        // A node that says its level is read as it says.
        let nfd_v3 = labels(&[V2_DEFAULT, V3_DEFAULT], &[]);
        assert_eq!(
            judged_node_variant(&nfd_v3, "amd64", Baseline).as_deref(),
            Some("v3")
        );
        // x86-64-v3 alternatives: a silent node qualifies only under AnyLevel.
        assert_eq!(x86_64_level_alternatives(3, AnyLevel).len(), 4);
        assert_eq!(x86_64_level_alternatives(3, Baseline).len(), 3);
    }
}
