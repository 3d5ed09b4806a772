use std::collections::HashSet;

use multiarch_plugins::{
    image_platforms::{ContainerImagePlatforms, PodImagePlatforms},
    model::{cluster::ClusterState, node::NodeBuilder, pod::PodBuilder},
    testing::{Fixture, known},
};
use rand::SeedableRng;

use super::*;

#[test]
fn feasible_nodes_to_find_matches_kube_scheduler() {
    let cases = [
        (50, 0, 50),
        (500, 0, 230),
        (1000, 0, 420),
        (5000, 0, 500),
        (6000, 0, 300),
        (6000, 100, 6000),
        (200, 10, 100),
    ];
    for (nodes, pct, want) in cases {
        assert_eq!(
            num_feasible_nodes_to_find(nodes, pct),
            want,
            "{nodes} nodes at {pct}%"
        );
    }
}

fn fixture(cluster: ClusterState, image_archs: &[&str], cpu: &str) -> Fixture {
    let pod = PodBuilder::new("ns", "p")
        .container("app", "app:1", cpu, "1Gi")
        .info();
    let mut f = Fixture::new(pod).with_cluster(cluster);
    f.images = PodImagePlatforms {
        containers: vec![ContainerImagePlatforms {
            container: "app".into(),
            image: "app:1".into(),
            platforms: known(image_archs),
            left_out: None,
        }],
    };
    f
}

#[test]
fn picks_only_compatible_nodes_and_explains_failures() {
    let mut cluster = ClusterState::new();
    for (name, arch, cpu) in [
        ("a1", "amd64", "4"),
        ("a2", "amd64", "1"),
        ("r1", "arm64", "1"),
        ("z1", "s390x", "8"),
        ("z2", "s390x", "8"),
    ] {
        cluster.upsert_node(
            NodeBuilder::new(name, arch)
                .capacity(cpu, "8Gi", 110)
                .info(),
        );
    }
    let profile = Profile::default();
    let mut rng = SmallRng::seed_from_u64(1);
    let mut rotation = Rotation::default();

    let f = fixture(cluster.clone(), &["amd64", "arm64"], "2");
    let placed = run(&profile, &f.ctx(), &mut rotation, &mut rng).unwrap();
    assert_eq!(cluster.nodes()[placed.node].name, "a1");
    assert_eq!(placed.compatible.unwrap().describe(), "amd64, arm64");

    let f = fixture(cluster, &["amd64", "arm64"], "6");
    let diagnosis = run(&profile, &f.ctx(), &mut rotation, &mut rng).unwrap_err();
    // 6 cpu is more than any compatible node has: no preemption note.
    assert_eq!(
        diagnosis.message(),
        "0/5 nodes are available: 2 node(s) didn't match the pod's image architectures \
         (images support amd64, arm64), 3 Insufficient cpu."
    );
    assert!(diagnosis.rejectors.contains("ImageArchitecture"));
    assert!(diagnosis.rejectors.contains("NodeResourcesFit"));
}

#[test]
fn ties_are_broken_at_random_and_rotation_moves_on() {
    let mut cluster = ClusterState::new();
    for i in 0..4 {
        cluster.upsert_node(NodeBuilder::new(&format!("n{i}"), "amd64").info());
    }
    let f = fixture(cluster, &["amd64"], "100m");
    let profile = Profile::default();
    let mut rng = SmallRng::seed_from_u64(7);
    let mut rotation = Rotation::default();
    let mut chosen = HashSet::new();
    for _ in 0..40 {
        chosen.insert(
            run(&profile, &f.ctx(), &mut rotation, &mut rng)
                .unwrap()
                .node,
        );
    }
    assert_eq!(
        chosen.len(),
        4,
        "identical nodes must all be picked sometimes"
    );
}

#[test]
fn large_clusters_stop_after_enough_feasible_nodes() {
    let mut cluster = ClusterState::new();
    for i in 0..2000 {
        let arch = if i % 2 == 0 { "amd64" } else { "arm64" };
        cluster.upsert_node(NodeBuilder::new(&format!("n{i}"), arch).info());
    }
    let f = fixture(cluster, &["arm64"], "100m");
    let profile = Profile::default();
    let mut rng = SmallRng::seed_from_u64(3);
    let mut rotation = Rotation::default();
    let placed = run(&profile, &f.ctx(), &mut rotation, &mut rng).unwrap();
    // 2,000 nodes: adaptive 34% = 680 feasible nodes wanted, counted over every node
    // although only the arm64 ones (the platform index) are visited.
    assert_eq!(placed.feasible, 680);
    assert_eq!(placed.evaluated, 680);
    assert_eq!(
        f.cluster.nodes()[placed.node].platform.architecture,
        "arm64"
    );
    // Where a walk over every node would have stopped: after the 680th arm64 node (n1359).
    assert_eq!(rotation.0, 1360);
    let next = run(&profile, &f.ctx(), &mut rotation, &mut rng).unwrap();
    assert_eq!(next.feasible, 680);
    // From n1361 on, wrapping around after n1999 (320 arm64 nodes) to n719.
    assert_eq!(rotation.0, 720);
}

#[test]
fn the_rotation_moves_past_the_last_candidate_that_completed_the_search() {
    let mut cluster = ClusterState::new();
    for i in 0..200 {
        let arch = if i % 2 == 0 { "arm64" } else { "amd64" };
        cluster.upsert_node(NodeBuilder::new(&format!("n{i}"), arch).info());
    }
    // 200 nodes: 100 feasible wanted; the 100th arm64 node is n198, the last candidate.
    let f = fixture(cluster, &["arm64"], "100m");
    let mut rotation = Rotation::default();
    let placed = run(
        &Profile::default(),
        &f.ctx(),
        &mut rotation,
        &mut SmallRng::seed_from_u64(5),
    )
    .unwrap();
    assert_eq!(placed.feasible, 100);
    // As a walk over every node: it stopped at n198, so the next one starts at n199.
    assert_eq!(rotation.0, 199);
}

#[test]
fn a_pod_that_fits_nowhere_is_diagnosed_over_every_node() {
    let mut cluster = ClusterState::new();
    for i in 0..1000 {
        let arch = if i % 4 == 0 { "arm64" } else { "amd64" };
        let mut node = NodeBuilder::new(&format!("n{i}"), arch).capacity("8", "32Gi", 110);
        if i % 10 == 1 {
            node = node.unschedulable();
        }
        cluster.upsert_node(node.info());
    }
    // Too big for any arm64 node.
    let f = fixture(cluster, &["arm64"], "64");
    let mut rotation = Rotation::default();
    let why = run(
        &Profile::default(),
        &f.ctx(),
        &mut rotation,
        &mut SmallRng::seed_from_u64(1),
    )
    .unwrap_err();
    let count = |text: &str| {
        why.reasons
            .iter()
            .filter(|(reason, _)| reason.contains(text))
            .map(|(_, n)| *n)
            .sum::<usize>()
    };
    // Each node's first failing filter, as without the index: the unschedulable amd64
    // nodes say so before their architecture is looked at.
    assert_eq!(count("unschedulable"), 100, "{:?}", why.reasons);
    assert_eq!(count("image architectures"), 650, "{:?}", why.reasons);
    assert_eq!(count("Insufficient cpu"), 250, "{:?}", why.reasons);
    assert_eq!(why.num_nodes, 1000);
}

#[test]
fn an_empty_cluster_says_so() {
    let f = fixture(ClusterState::new(), &["amd64"], "1");
    let d = run(
        &Profile::default(),
        &f.ctx(),
        &mut Rotation::default(),
        &mut SmallRng::seed_from_u64(0),
    )
    .unwrap_err();
    assert_eq!(d.message(), "no nodes available to schedule pods");
}

#[test]
fn scoring_prefers_the_configured_architecture() {
    let mut cluster = ClusterState::new();
    cluster.upsert_node(NodeBuilder::new("amd", "amd64").info());
    cluster.upsert_node(NodeBuilder::new("arm", "arm64").info());
    let mut f = fixture(cluster, &["amd64", "arm64"], "100m");
    f.preferences = vec![("arm64".into(), 80)];
    let profile = Profile::default();
    let mut rng = SmallRng::seed_from_u64(9);
    for _ in 0..10 {
        let placed = run(&profile, &f.ctx(), &mut Rotation::default(), &mut rng).unwrap();
        assert_eq!(f.cluster.nodes()[placed.node].name, "arm");
    }
}

#[test]
fn scoring_prefers_the_node_that_has_the_image_and_its_weight_turns_it_off() {
    let mut cluster = ClusterState::new();
    for name in ["cold-1", "warm", "cold-2"] {
        let node = NodeBuilder::new(name, "amd64");
        // 500 MB on one node of three: ImageLocality scores it 14, the others 0.
        let node = if name == "warm" {
            node.image(&["app:1", "app@sha256:aa"], 500 * 1024 * 1024)
        } else {
            node
        };
        cluster.upsert_node(node.info());
    }
    let f = fixture(cluster, &["amd64"], "100m");
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..10 {
        let placed = run(
            &Profile::default(),
            &f.ctx(),
            &mut Rotation::default(),
            &mut rng,
        )
        .unwrap();
        assert_eq!(f.cluster.nodes()[placed.node].name, "warm");
    }
    // Weight 0: the three nodes tie again and each is chosen.
    let off = Profile::new(&multiarch_crd::PlacementSpec {
        scoring: vec![multiarch_crd::ScorePluginWeight {
            name: multiarch_crd::ScorePluginName::ImageLocality,
            weight: 0,
        }],
        ..multiarch_crd::PlacementSpec::default()
    });
    let chosen: HashSet<String> = (0..60)
        .map(|_| {
            let placed = run(&off, &f.ctx(), &mut Rotation::default(), &mut rng).unwrap();
            f.cluster.nodes()[placed.node].name.clone()
        })
        .collect();
    assert_eq!(chosen.len(), 3, "{chosen:?}");
}

/// The parallel walk finds what the sequential one finds: the same feasible nodes, the
/// same failures and the same count of nodes evaluated, whatever the threads do.
#[test]
fn parallel_walk_matches_the_sequential_walk() {
    let mut rng = SmallRng::seed_from_u64(7);
    for case in 0..400 {
        let n = rng.random_range(1..1200);
        let fits: Vec<bool> = {
            let share = rng.random_range(0..=10);
            (0..n).map(|_| rng.random_range(0..10) < share).collect()
        };
        let subset: Vec<usize> = (0..n).filter(|_| rng.random_range(0..4) > 0).collect();
        let candidates = if case % 2 == 0 || subset.is_empty() {
            Candidates::All(n)
        } else {
            Candidates::Some(&subset)
        };
        let start = rng.random_range(0..candidates.len());
        let target = rng.random_range(0..=candidates.len() + 5);
        let check = |i: usize| (!fits[i]).then(|| Status::unschedulable(format!("node {i}")));
        let (seq_feasible, seq_failures, seq_evaluated) =
            walk::filter_sequential(candidates, start, target, &check);
        let (par_feasible, par_failures, par_evaluated) =
            walk::filter_parallel(candidates, start, target, &check);
        let messages = |failures: &[(usize, Status)]| -> Vec<(usize, String)> {
            failures.iter().map(|(i, s)| (*i, s.message())).collect()
        };
        let what = format!("case {case}: {n} nodes from {start}, target {target}");
        assert_eq!(par_feasible, seq_feasible, "{what}");
        assert_eq!(messages(&par_failures), messages(&seq_failures), "{what}");
        assert_eq!(par_evaluated, seq_evaluated, "{what}");
    }
}

/// Scoring fanned out over the thread pool gives every node the total the sequential
/// scoring gives it (chunks of 256 nodes; the plugins normalize over all of them).
#[test]
fn parallel_scoring_matches_the_sequential_scoring() {
    let mut rng = SmallRng::seed_from_u64(11);
    let mut cluster = ClusterState::new();
    for i in 0..3000 {
        let arch = ["amd64", "arm64"][i % 2];
        let cpu = ["2", "8", "32"][rng.random_range(0..3)];
        let mut node = NodeBuilder::new(&format!("n{i}"), arch)
            .capacity(cpu, "64Gi", 110)
            .label("topology.kubernetes.io/zone", ["a", "b", "c"][i % 3]);
        if rng.random_range(0..10) == 0 {
            node = node.taint("dedicated", "infra", "PreferNoSchedule");
        }
        cluster.upsert_node(node.info());
    }
    let mut f = fixture(cluster, &["amd64", "arm64"], "500m");
    f.preferences = vec![("arm64".into(), 40), ("amd64".into(), 20)];
    let profile = Profile::default();
    let ctx = f.ctx();
    let mut cycle = Cycle::pre_filter(&profile, &ctx).unwrap();
    let feasible: Vec<usize> = (0..ctx.cluster.nodes().len())
        .filter(|_| rng.random_range(0..4) > 0)
        .collect();
    let nodes = ctx.cluster.nodes();
    let sequential = score(
        &profile,
        &ctx,
        &mut cycle.state.clone(),
        nodes,
        &feasible,
        false,
    );
    let parallel = score(&profile, &ctx, &mut cycle.state, nodes, &feasible, true);
    assert_eq!(parallel, sequential);
    let distinct: HashSet<i64> = sequential.iter().copied().collect();
    assert!(distinct.len() > 3, "the nodes score alike: {distinct:?}");
}
