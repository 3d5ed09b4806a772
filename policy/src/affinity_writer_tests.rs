//! The affinity written for each kind of pod and build, and its agreement with the
//! scheduler's reading of nodes.

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
            "x86-64-v3 or arm64: one amd64 term per way a node can show the level",
            Value::Null,
            vec![
                Platform::new("linux", "amd64", Some("v3")),
                Platform::linux("arm64"),
            ],
            std::iter::once(json!({"matchExpressions": [arch(&["arm64"])]}))
                .chain(
                    x86_64_level_alternatives(3, UnknownNodeLevel::AnyLevel)
                        .into_iter()
                        .map(|alternative| {
                            let mut expressions = vec![arch(&["amd64"])];
                            expressions.extend(alternative.iter().map(|e| json!(e)));
                            json!({"matchExpressions": expressions})
                        }),
                )
                .collect(),
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
            UnknownNodeLevel::AnyLevel,
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

/// Every flag of an x86-64 level node-feature-discovery may label, and the marker.
const NFD_FLAGS: [&str; 22] = [
    "CMPXCHG8", "CX16", "LAHF", "POPCNT", "SSE3", "SSE4", "SSE42", "SSSE3", "AVX", "AVX2", "BMI1",
    "BMI2", "F16C", "FMA3", "LZCNT", "MOVBE", "OSXSAVE", "AVX512F", "AVX512BW", "AVX512CD",
    "AVX512DQ", "AVX512VL",
];

/// The affinity written for an image of x86-64 `level` lets kube-scheduler place it on
/// exactly the nodes multiarch-scheduler would: those `node_variant` reads at that level
/// or above. Checked over 20,000 label sets drawn by a fixed generator (the same every
/// run): multiarch's label or not, and each NFD flag absent, "true" or "false"; for each
/// meaning of a node that says nothing (`unknownNodeLevel`).
#[test]
fn the_written_level_affinity_and_the_schedulers_reading_agree_on_every_node() {
    for unknown in [UnknownNodeLevel::AnyLevel, UnknownNodeLevel::Baseline] {
        written_and_read_agree(unknown);
    }
}

fn written_and_read_agree(unknown: UnknownNodeLevel) {
    use crate::node_level::{HIDDEN_BY_DEFAULT, NFD_CPUID_PREFIX, judged_node_variant};
    use crate::selectors::NodeSelector;

    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |bound: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % bound
    };
    for level in 1..=5 {
        let image = Platform::new("linux", "amd64", Some(&format!("v{level}")));
        let mut p = pod(Value::Null);
        merge_required_for(
            &mut p,
            &ArchRequirement::from_platforms(std::slice::from_ref(&image)),
            std::slice::from_ref(&image),
            unknown,
        );
        let written: NodeSelector = (&serde_json::from_value::<
            k8s_openapi::api::core::v1::NodeSelector,
        >(json!({"nodeSelectorTerms": required_terms(&p)}))
        .unwrap())
            .into();
        // How many NFD-only nodes of each configuration ran the image and how many did
        // not: all four must occur.
        let mut nfd_only = [[0_u32; 2]; 2];
        for _ in 0..4_000 {
            let mut labels = crate::selectors::Labels::new();
            labels.insert(NODE_ARCH_LABEL.into(), "amd64".into());
            // Mostly NFD-only nodes, the case where the two readings could part.
            match next(8) {
                0 => {}
                n => {
                    if n == 1 {
                        labels.insert(NODE_VARIANT_LABEL.into(), format!("v{}", next(4) + 1));
                    }
                    // NFD's default configuration (the hidden flags never labelled)
                    // or every flag published; most flags there, so that high levels
                    // are drawn too.
                    let default_configuration = next(2) == 0;
                    for flag in NFD_FLAGS {
                        if default_configuration && HIDDEN_BY_DEFAULT.contains(&flag) {
                            continue;
                        }
                        let value = match next(10) {
                            0 => None,
                            1 => Some("false"),
                            _ => Some("true"),
                        };
                        if let Some(value) = value {
                            labels.insert(format!("{NFD_CPUID_PREFIX}{flag}"), value.into());
                        }
                    }
                }
            }
            let node = Platform::new(
                "linux",
                "amd64",
                judged_node_variant(&labels, "amd64", unknown).as_deref(),
            );
            let runs = image.runs_on(&node);
            assert_eq!(
                written.matches(&labels, "n"),
                runs,
                "v{level} image, node {labels:?} read as {node:?} ({unknown:?})"
            );
            if !labels.contains_key(NODE_VARIANT_LABEL) && node.variant.is_some() {
                let every_flag = HIDDEN_BY_DEFAULT
                    .iter()
                    .any(|f| labels.contains_key(&format!("{NFD_CPUID_PREFIX}{f}")));
                nfd_only[usize::from(every_flag)][usize::from(runs)] += 1;
            }
        }
        if (2..=4).contains(&level) {
            assert!(
                nfd_only.iter().flatten().all(|n| *n > 0),
                "v{level}: {nfd_only:?}"
            );
        }
    }
}
