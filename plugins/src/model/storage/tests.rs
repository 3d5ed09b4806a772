use k8s_openapi::{api::core::v1 as core, apimachinery::pkg::apis::meta::v1 as meta};

use super::{builders::*, *};
use multiarch_policy::selectors::Labels;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

const GI: i64 = 1 << 30;

/// A case's name, the volumes offered, the one chosen.
type VolumeCase = (
    &'static str,
    Vec<PersistentVolumeInfo>,
    Option<&'static str>,
);

/// For a claim of 5Gi of `fast` on node n1 (zone a).
fn matching_volume_cases() -> Vec<VolumeCase> {
    vec![
        (
            "smallest that fits",
            vec![
                VolumeBuilder::new("big", "fast", "100Gi").info(),
                VolumeBuilder::new("small", "fast", "10Gi").info(),
                VolumeBuilder::new("tiny", "fast", "1Gi").info(),
            ],
            Some("small"),
        ),
        (
            "other class",
            vec![VolumeBuilder::new("v", "slow", "10Gi").info()],
            None,
        ),
        (
            "not available (the PV controller never ran)",
            vec![
                VolumeBuilder::new("v", "fast", "10Gi")
                    .phase("Pending")
                    .info(),
            ],
            None,
        ),
        (
            "bound to another claim",
            vec![
                VolumeBuilder::new("v", "fast", "10Gi")
                    .claim_ref("ns", "other", "x")
                    .info(),
            ],
            None,
        ),
        (
            "pre-bound to this claim wins even if larger and not available",
            vec![
                VolumeBuilder::new("small", "fast", "6Gi").info(),
                VolumeBuilder::new("mine", "fast", "50Gi")
                    .claim_ref("ns", "c", "")
                    .phase("Pending")
                    .info(),
            ],
            Some("mine"),
        ),
        (
            "pre-bound but the node does not fit: none",
            vec![
                VolumeBuilder::new("free", "fast", "6Gi").info(),
                VolumeBuilder::new("mine", "fast", "50Gi")
                    .claim_ref("ns", "c", "")
                    .affinity("zone", &["b"])
                    .info(),
            ],
            None,
        ),
        (
            "node affinity",
            vec![
                VolumeBuilder::new("elsewhere", "fast", "6Gi")
                    .local_on("n2")
                    .info(),
                VolumeBuilder::new("here", "fast", "60Gi")
                    .local_on("n1")
                    .info(),
            ],
            Some("here"),
        ),
        (
            "access modes must all be offered",
            vec![
                VolumeBuilder::new("rox", "fast", "10Gi")
                    .access_modes(&["ReadOnlyMany"])
                    .info(),
            ],
            None,
        ),
        (
            "too small",
            vec![VolumeBuilder::new("v", "fast", "4Gi").info()],
            None,
        ),
    ]
}

/// kube's `FindMatchingVolume` cases, for the scheduler's path (a node is given).
#[test]
fn matching_volume_table() {
    let node = labels(&[("kubernetes.io/hostname", "n1"), ("zone", "a")]);
    let claim = ClaimBuilder::new("ns", "c", "fast", "5Gi").info();
    let cases = matching_volume_cases();
    let find = |volumes: &[PersistentVolumeInfo], excluded: &[&str]| {
        claim
            .matching_volume(
                volumes
                    .iter()
                    .filter(|v| claim.may_use(v))
                    .map(|v| (v, false)),
                &node,
                excluded,
            )
            .map(|v| v.name.clone())
    };
    for (name, volumes, want) in cases {
        let found = find(&volumes, &[]);
        assert_eq!(found.as_deref(), want, "{name}");
    }
    let volumes = [
        VolumeBuilder::new("a", "fast", "10Gi").info(),
        VolumeBuilder::new("b", "fast", "20Gi").info(),
    ];
    assert_eq!(
        find(&volumes, &["a"]).as_deref(),
        Some("b"),
        "volumes chosen for other claims are excluded"
    );
}

#[test]
fn reads_the_recorded_volumes_and_claims() {
    let pvs: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/kube-scheduler/volume-pvs.json"
    )))
    .unwrap();
    let pv: core::PersistentVolume = serde_json::from_value(pvs["items"][1].clone()).unwrap();
    let info = PersistentVolumeInfo::from_api(&pv).unwrap();
    assert_eq!(info.name, "pv-wffc-1");
    assert_eq!(info.storage_class, "local-wffc");
    assert_eq!(info.capacity, GI);
    assert!(
        !info.available,
        "phase Pending: no PV controller made it Available"
    );
    assert_eq!(
        info.local_node_names.as_deref(),
        Some(&["rec-ppc64le-1".to_owned()][..])
    );
    assert!(info.fits_node(&labels(&[("kubernetes.io/hostname", "rec-ppc64le-1")])));
    assert!(!info.fits_node(&labels(&[("kubernetes.io/hostname", "rec-ppc64le-0")])));

    let pvcs: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/kube-scheduler/volume-pvcs.json"
    )))
    .unwrap();
    let pvc: core::PersistentVolumeClaim =
        serde_json::from_value(pvcs["items"][1].clone()).unwrap();
    let claim = ClaimInfo::from_api(&pvc).unwrap();
    assert_eq!(claim.key(), "vol/wffc");
    assert_eq!(claim.request, Some(GI));
    assert!(claim.access_modes.contains(AccessModes::READ_WRITE_ONCE));
    assert!(!claim.fully_bound());
}

/// A local volume on n1 whose affinity has two terms, each nothing but
/// `kubernetes.io/hostname In`: (n1 and n1|n9) or n2.
fn local_volume_of_two_hostname_terms() -> core::PersistentVolume {
    let mut pv = VolumeBuilder::new("v", "c", "1Gi").local_on("n1").obj();
    let terms = terms_of(&mut pv);
    terms[0]
        .match_expressions
        .as_mut()
        .unwrap()
        .push(core::NodeSelectorRequirement {
            key: "kubernetes.io/hostname".into(),
            operator: "In".into(),
            values: Some(vec!["n1".into(), "n9".into()]),
        });
    terms.push(core::NodeSelectorTerm {
        match_expressions: Some(vec![core::NodeSelectorRequirement {
            key: "kubernetes.io/hostname".into(),
            operator: "In".into(),
            values: Some(vec!["n2".into()]),
        }]),
        match_fields: None,
    });
    pv
}

#[test]
fn local_names_intersect_within_terms_and_unite_across() {
    let info = PersistentVolumeInfo::from_api(&local_volume_of_two_hostname_terms()).unwrap();
    assert_eq!(
        info.local_node_names.as_deref(),
        Some(&["n1".to_owned(), "n2".to_owned()][..])
    );
    // Not a local volume: no narrowing.
    let zonal = VolumeBuilder::new("z", "c", "1Gi")
        .affinity("kubernetes.io/hostname", &["n1"])
        .info();
    assert!(zonal.local_node_names.is_none());
}

#[test]
fn a_hostname_only_affinity_is_kept_as_its_hostnames() {
    let mut pv = local_volume_of_two_hostname_terms();
    let info = PersistentVolumeInfo::from_api(&pv).unwrap();
    assert!(info.hostname_only_affinity);
    assert!(info.node_affinity.is_none(), "the hostnames say it all");
    let (local, pinned) = (
        info.local_node_names.as_ref().unwrap(),
        info.pinned_hostnames.as_ref().unwrap(),
    );
    assert!(Arc::ptr_eq(local, pinned), "equal lists are one allocation");
    for (hostname, fits) in [("n1", true), ("n2", true), ("n9", false), ("n3", false)] {
        let node = labels(&[("kubernetes.io/hostname", hostname), ("zone", "a")]);
        assert_eq!(info.fits_node(&node), fits, "{hostname}");
    }
    assert!(
        !info.fits_node(&labels(&[("zone", "a")])),
        "no hostname label"
    );

    // A term that also reads another label keeps the selector, and it decides.
    terms_of(&mut pv)[1]
        .match_expressions
        .as_mut()
        .unwrap()
        .push(core::NodeSelectorRequirement {
            key: "zone".into(),
            operator: "In".into(),
            values: Some(vec!["b".into()]),
        });
    let info = PersistentVolumeInfo::from_api(&pv).unwrap();
    assert!(!info.hostname_only_affinity && info.node_affinity.is_some());
    assert!(info.fits_node(&labels(&[("kubernetes.io/hostname", "n1"), ("zone", "a")])));
    assert!(!info.fits_node(&labels(&[("kubernetes.io/hostname", "n2"), ("zone", "a")])));
    assert!(info.fits_node(&labels(&[("kubernetes.io/hostname", "n2"), ("zone", "b")])));
}

fn terms_of(pv: &mut core::PersistentVolume) -> &mut Vec<core::NodeSelectorTerm> {
    &mut pv
        .spec
        .as_mut()
        .unwrap()
        .node_affinity
        .as_mut()
        .unwrap()
        .required
        .as_mut()
        .unwrap()
        .node_selector_terms
}

#[test]
fn assumed_bindings_hide_volumes_until_confirmed_or_reverted() {
    let mut catalog = StorageCatalog::default();
    catalog.upsert_volume(VolumeBuilder::new("v", "fast", "10Gi").info());
    catalog.upsert_claim(ClaimBuilder::new("ns", "c", "fast", "1Gi").info());
    let claim = catalog.claim("ns", "c").unwrap().clone();
    let plan = VolumeBindingPlan {
        bindings: vec![StaticBinding {
            volume: "v".into(),
            volume_resource_version: "1".into(),
            claim: ClaimRef {
                namespace: "ns".into(),
                name: "c".into(),
                uid: claim.uid.clone(),
            },
            claim_resource_version: "1".into(),
            bound_by_scheduler: true,
        }],
        provisions: vec![],
    };
    catalog.assume(&plan, "n1");
    let other = ClaimBuilder::new("ns", "other", "fast", "1Gi").info();
    let node = Labels::new();
    assert!(
        other
            .matching_volume(
                catalog
                    .volumes_of_class("fast")
                    .map(AsRef::as_ref)
                    .filter(|v| other.may_use(v))
                    .map(|v| (v, false)),
                &node,
                &[]
            )
            .is_none(),
        "the assumed volume is taken"
    );
    // A stale version from the watch does not undo the assumption.
    catalog.upsert_volume(VolumeBuilder::new("v", "fast", "10Gi").info());
    assert!(catalog.volume("v").unwrap().claim_ref.is_some());
    catalog.revert(&plan);
    assert!(catalog.volume("v").unwrap().claim_ref.is_none());

    catalog.assume(&plan, "n1");
    let mut written = VolumeBuilder::new("v", "fast", "10Gi")
        .claim_ref("ns", "c", &claim.uid)
        .info();
    written.resource_version = "2".into();
    catalog.upsert_volume(written);
    catalog.revert(&plan);
    assert!(
        catalog.volume("v").unwrap().claim_ref.is_some(),
        "a newer version from the API replaced the assumption"
    );
    assert_eq!(catalog.assumed(), 0);
}

#[test]
fn unclaimed_local_volumes_are_indexed_by_host_and_follow_their_claim() {
    let mut catalog = StorageCatalog::default();
    catalog.upsert_volume(
        VolumeBuilder::new("a1", "local", "10Gi")
            .local_on("n1")
            .info(),
    );
    catalog.upsert_volume(
        VolumeBuilder::new("b1", "local", "10Gi")
            .local_on("n2")
            .info(),
    );
    catalog.upsert_volume(VolumeBuilder::new("net", "local", "10Gi").info());
    catalog.upsert_volume(
        VolumeBuilder::new("pre", "other", "10Gi")
            .local_on("n1")
            .claim_ref("ns", "c", "")
            .info(),
    );
    let names =
        |it: &mut dyn Iterator<Item = &std::sync::Arc<PersistentVolumeInfo>>| -> Vec<String> {
            it.map(|v| v.name.clone()).collect()
        };
    assert_eq!(names(&mut catalog.unclaimed_on_host("local", "n1")), ["a1"]);
    assert_eq!(
        names(&mut catalog.unclaimed_on_host("local", "n3")),
        Vec::<String>::new()
    );
    assert_eq!(
        names(&mut catalog.unclaimed_on_host("other", "n1")),
        Vec::<String>::new()
    );
    let claim = ClaimBuilder::new("ns", "c", "local", "1Gi").info();
    assert_eq!(
        names(&mut catalog.unpinned_volumes_for_claim(&claim)),
        ["net", "pre"],
        "unpinned ones of its class, and the one naming it whatever its class"
    );
    // Claimed by the watch: gone from the host index; released: back.
    catalog.upsert_volume(
        VolumeBuilder::new("a1", "local", "10Gi")
            .local_on("n1")
            .claim_ref("ns", "x", "")
            .info(),
    );
    assert_eq!(
        names(&mut catalog.unclaimed_on_host("local", "n1")),
        Vec::<String>::new()
    );
    catalog.upsert_volume(
        VolumeBuilder::new("a1", "local", "10Gi")
            .local_on("n1")
            .info(),
    );
    assert_eq!(names(&mut catalog.unclaimed_on_host("local", "n1")), ["a1"]);
    catalog.delete_volume("a1");
    assert_eq!(
        names(&mut catalog.unclaimed_on_host("local", "n1")),
        Vec::<String>::new()
    );
}

#[test]
fn provisioning_is_assumed_on_the_claim() {
    let mut catalog = StorageCatalog::default();
    catalog.upsert_claim(ClaimBuilder::new("ns", "c", "fast", "1Gi").info());
    let plan = VolumeBindingPlan {
        bindings: vec![],
        provisions: vec![Provision {
            claim: ClaimRef {
                namespace: "ns".into(),
                name: "c".into(),
                uid: "u".into(),
            },
            claim_resource_version: "1".into(),
        }],
    };
    catalog.assume(&plan, "n1");
    assert_eq!(
        catalog.claim("ns", "c").unwrap().selected_node.as_deref(),
        Some("n1")
    );
    catalog.revert(&plan);
    assert!(catalog.claim("ns", "c").unwrap().selected_node.is_none());
}

#[test]
fn classes_allow_topologies_and_capacities_fit() {
    let class = ClassBuilder::new("c", "csi.example.com", true)
        .allowed("topology.kubernetes.io/zone", &["a", "b"])
        .info();
    assert!(class.allows(&labels(&[("topology.kubernetes.io/zone", "b")])));
    assert!(!class.allows(&labels(&[("topology.kubernetes.io/zone", "c")])));
    assert!(!class.allows(&Labels::new()));
    assert!(
        ClassBuilder::new("open", "p", true)
            .info()
            .allows(&Labels::new())
    );

    let capacity = StorageCapacityInfo {
        key: "ns/cap".into(),
        storage_class: "c".into(),
        node_topology: Some(multiarch_policy::selectors::LabelSelector::default()),
        capacity: Some(10 * GI),
        maximum_volume_size: Some(2 * GI),
    };
    assert!(capacity.fits(2 * GI));
    assert!(
        !capacity.fits(3 * GI),
        "maximumVolumeSize wins over capacity"
    );
    assert!(capacity.reachable_from(&Labels::new()));
    let nowhere = StorageCapacityInfo {
        node_topology: None,
        ..capacity
    };
    assert!(!nowhere.reachable_from(&Labels::new()));
}

proptest::proptest! {
    /// For the volumes the per-host index holds (no claim reference, the claim's class),
    /// the shortcut answers as `may_use`.
    #[test]
    fn may_use_unclaimed_answers_as_may_use(
        capacity in 0u8..4,
        request in 0u8..4,
        block in proptest::bool::ANY,
        claim_block in proptest::bool::ANY,
        attributes in 0u8..2,
        claim_attributes in 0u8..2,
        deleting in proptest::bool::ANY,
        phase in 0u8..3,
        labelled in proptest::bool::ANY,
        selects in proptest::bool::ANY,
        modes in 0u8..3,
        claim_modes in 0u8..3,
    ) {
        const MODES: [&[&str]; 3] = [
            &["ReadWriteOnce"],
            &["ReadWriteMany"],
            &["ReadWriteOnce", "ReadOnlyMany"],
        ];
        let mut volume = VolumeBuilder::new("v", "local", &format!("{capacity}Gi"))
            .local_on("n1")
            .phase(["Available", "Bound", "Released"][usize::from(phase)])
            .access_modes(MODES[usize::from(modes)]);
        if labelled {
            volume = volume.label("tier", "gold");
        }
        let mut volume = volume.info();
        volume.block = block;
        volume.deleting = deleting;
        volume.attributes_class = ["", "fast"][usize::from(attributes)].to_owned();
        let mut claim = ClaimBuilder::new("ns", "c", "local", &format!("{request}Gi"))
            .access_modes(MODES[usize::from(claim_modes)])
            .info();
        claim.block = claim_block;
        claim.attributes_class = ["", "fast"][usize::from(claim_attributes)].to_owned();
        if selects {
            claim.selector = Some(LabelSelector::from(&meta::LabelSelector {
                match_labels: Some([("tier".to_owned(), "gold".to_owned())].into()),
                ..Default::default()
            }));
        }
        proptest::prop_assert_eq!(claim.may_use_unclaimed(&volume), claim.may_use(&volume));
    }
}

/// A random unclaimed volume of class `local` pinned to `n1`, and whether its node
/// affinity also asks for a zone (`a` matches the node, `b` does not).
fn random_local_volume(
    name: &str,
    (capacity, modes, block, phase, deleting): (u8, u8, bool, u8, bool),
    (attributes, zone, labelled): (bool, u8, bool),
) -> PersistentVolumeInfo {
    const MODES: [&[&str]; 3] = [
        &["ReadWriteOnce"],
        &["ReadWriteMany"],
        &["ReadWriteOnce", "ReadOnlyMany"],
    ];
    let mut volume = VolumeBuilder::new(name, "local", &format!("{}Gi", capacity % 4 * 10))
        .local_on("n1")
        .phase(["Available", "Released"][usize::from(phase % 2)])
        .access_modes(MODES[usize::from(modes % 3)]);
    if zone > 0 {
        volume = volume.also_requiring("zone", &[["a", "b"][usize::from(zone % 2)]]);
    }
    if labelled {
        volume = volume.label("tier", "gold");
    }
    let mut volume = volume.info();
    volume.block = block;
    volume.deleting = deleting;
    if attributes {
        "fast".clone_into(&mut volume.attributes_class);
    }
    volume
}

proptest::proptest! {
    /// Where a host's summary answers whether a claim finds a volume there, it answers as
    /// matching the volumes themselves does; and it answers for every claim that selects
    /// no labels and asks for no attributes class, on every host with at most
    /// SUMMARIZED_PER_HOST volumes matched by hostname alone.
    #[test]
    fn a_host_summary_answers_as_the_volumes_do(
        volumes in proptest::collection::vec(
            (
                (0u8..4, 0u8..3, proptest::bool::ANY, 0u8..2, proptest::bool::ANY),
                (proptest::bool::weighted(0.2), 0u8..3, proptest::bool::ANY),
            ),
            0..6,
        ),
        (request, claim_modes, claim_block, claim_attributes, selects)
            in (0u8..5, 0u8..3, proptest::bool::ANY, proptest::bool::weighted(0.2), proptest::bool::weighted(0.2)),
    ) {
        const MODES: [&[&str]; 3] = [
            &["ReadWriteOnce"],
            &["ReadWriteMany"],
            &["ReadWriteOnce", "ReadOnlyMany"],
        ];
        let volumes: Vec<PersistentVolumeInfo> = volumes
            .into_iter()
            .enumerate()
            .map(|(i, (a, b))| random_local_volume(&format!("v{i}"), a, b))
            .collect();
        let mut claim = ClaimBuilder::new("ns", "c", "local", &format!("{}Gi", request * 10))
            .access_modes(MODES[usize::from(claim_modes)])
            .info();
        if request == 0 {
            claim.request = None;
        }
        claim.block = claim_block;
        if claim_attributes {
            "fast".clone_into(&mut claim.attributes_class);
        }
        if selects {
            claim.selector = Some(LabelSelector::from(&meta::LabelSelector {
                match_labels: Some([("tier".to_owned(), "gold".to_owned())].into()),
                ..Default::default()
            }));
        }
        let node = labels(&[("kubernetes.io/hostname", "n1"), ("zone", "a")]);
        let read = claim
            .matching_volume(
                volumes
                    .iter()
                    .filter(|v| claim.may_use_unclaimed(v))
                    .map(|v| (v, v.hostname_only_affinity)),
                &node,
                &[],
            )
            .is_some();
        let summarizable = volumes.len() <= SUMMARIZED_PER_HOST
            && volumes
                .iter()
                .all(|v| v.hostname_only_affinity && v.attributes_class.is_empty());
        let summary = HostVolumes::of(&volumes);
        proptest::prop_assert_eq!(
            summary == HostVolumes::Unsummarized,
            !summarizable,
            "{:?}",
            summary
        );
        if claim.can_match_summaries() {
            let answer = summary.serve(&claim);
            proptest::prop_assert_eq!(answer.is_some(), summarizable);
            if let Some(found) = answer {
                proptest::prop_assert_eq!(found, read);
            }
        } else {
            proptest::prop_assert!(selects || claim_attributes);
        }
    }
}
