//! kube-scheduler 1.36's `TestImageLocalityPriority`, case for case, and what the
//! cluster model adds: reports that change, nodes that go.

use super::*;
use crate::{
    model::{cluster::ClusterState, node::NodeBuilder, pod::PodBuilder},
    testing::Fixture,
};

/// Nodes as kube-scheduler's test writes them: `(name, [(names, size in MB)])`.
type NodeImages<'a> = (&'a str, &'a [(&'a [&'a str], i64)]);

const NODE_40_300_2000: &[(&[&str], i64)] = &[
    (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
    (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
    (&["gcr.io/2000:latest"], 2000),
];
const NODE_250_10: &[(&[&str], i64)] = &[
    (&["gcr.io/250:latest"], 250),
    (&["gcr.io/10:latest", "gcr.io/10:v1"], 10),
];
const NODE_600_40_900: &[(&[&str], i64)] = &[
    (&["gcr.io/600:latest"], 600),
    (&["gcr.io/40:latest"], 40),
    (&["gcr.io/900:latest"], 900),
];
const NODE_300_600_900: &[(&[&str], i64)] = &[
    (&["gcr.io/300:latest"], 300),
    (&["gcr.io/600:latest"], 600),
    (&["gcr.io/900:latest"], 900),
];
const NODE_4000_30: &[(&[&str], i64)] =
    &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)];
const NODE_20_30_40: &[(&[&str], i64)] = &[
    (&["gcr.io/20:latest"], 20),
    (&["gcr.io/30:latest"], 30),
    (&["gcr.io/40:latest"], 40),
];
const NO_IMAGES: &[(&[&str], i64)] = &[];

fn cluster(nodes: &[NodeImages<'_>]) -> ClusterState {
    let mut cluster = ClusterState::new();
    for (name, images) in nodes {
        let mut node = NodeBuilder::new(name, "amd64");
        for (names, mb) in *images {
            node = node.image(names, mb * MB);
        }
        cluster.upsert_node(node.info());
    }
    cluster
}

fn scores(pod: PodBuilder, cluster: ClusterState) -> Vec<i64> {
    let fixture = Fixture::new(pod.info()).with_cluster(cluster);
    let ctx = fixture.ctx();
    let state = CycleState::new();
    let nodes: Vec<&NodeInfo> = fixture.cluster.nodes().iter().collect();
    let mut all = vec![-1; nodes.len()];
    ImageLocality.score_all(&ctx, &state, &nodes, &mut all);
    let one_by_one: Vec<i64> = nodes
        .iter()
        .map(|node| ImageLocality.score(&ctx, &state, node))
        .collect();
    assert_eq!(all, one_by_one, "score_all and score agree");
    all
}

fn pod(images: &[&str]) -> PodBuilder {
    images
        .iter()
        .enumerate()
        .fold(PodBuilder::new("ns", "p"), |pod, (i, image)| {
            pod.container(&format!("c{i}"), image, "0", "0")
        })
}

#[test]
fn kube_schedulers_cases_score_the_same() {
    let cases: &[(&str, PodBuilder, &[NodeImages<'_>], &[i64])] = &[
        (
            "two images spread on two nodes, prefer the larger image one",
            pod(&["gcr.io/40", "gcr.io/250"]),
            &[("node1", NODE_40_300_2000), ("node2", NODE_250_10)],
            &[0, 5],
        ),
        (
            "two images on one node, prefer this node",
            pod(&["gcr.io/40", "gcr.io/300"]),
            &[("node1", NODE_40_300_2000), ("node2", NODE_250_10)],
            &[7, 0],
        ),
        (
            "if exceed limit, use limit",
            pod(&["gcr.io/10", "gcr.io/4000"]),
            &[("node1", NODE_4000_30), ("node2", NODE_250_10)],
            &[100, 0],
        ),
        (
            "if exceed limit, use limit (with node which has no images present)",
            pod(&["gcr.io/10", "gcr.io/4000"]),
            &[
                ("node1", NODE_4000_30),
                ("node2", NODE_250_10),
                ("node3", NO_IMAGES),
            ],
            &[66, 0, 0],
        ),
        (
            "pod with multiple large images, node2 is preferred",
            pod(&["gcr.io/300", "gcr.io/600", "gcr.io/900"]),
            &[
                ("node1", NODE_600_40_900),
                ("node2", NODE_300_600_900),
                ("node3", NO_IMAGES),
            ],
            &[32, 36, 0],
        ),
        (
            "pod with multiple small images",
            pod(&["gcr.io/30", "gcr.io/40"]),
            &[("node1", NODE_20_30_40), ("node2", NODE_4000_30)],
            &[1, 0],
        ),
        (
            "pod with ImageVolume",
            pod(&["gcr.io/30"]).image_volume("imageVolume", "gcr.io/300"),
            &[("node1", NODE_300_600_900), ("node2", NODE_4000_30)],
            &[12, 0],
        ),
        (
            "include InitContainers: two images spread on two nodes, prefer the larger image one",
            pod(&["gcr.io/30"]).init_container("init", "gcr.io/300", "0", "0"),
            &[("node1", NODE_40_300_2000), ("node2", NODE_20_30_40)],
            &[6, 0],
        ),
    ];
    for (name, pod, nodes, expected) in cases {
        assert_eq!(scores(pod.clone(), cluster(nodes)), *expected, "{name}");
    }
}

#[test]
fn names_get_latest_only_without_a_tag() {
    for (name, expected) in [
        ("gcr.io/40", "gcr.io/40:latest"),
        ("gcr.io/40:v1", "gcr.io/40:v1"),
        ("localhost:5000/web", "localhost:5000/web:latest"),
        ("localhost:5000/web:1", "localhost:5000/web:1"),
        ("web", "web:latest"),
        // A digest has a colon after the last slash: left as it is, as kube-scheduler does.
        ("quay.io/x/web@sha256:ab", "quay.io/x/web@sha256:ab"),
    ] {
        assert_eq!(normalized(name), expected, "{name}");
    }
}

#[test]
fn scores_follow_the_nodes_reports_and_their_removal() {
    let mut cluster = cluster(&[("node1", NODE_4000_30), ("node2", NO_IMAGES)]);
    let big = || pod(&["gcr.io/4000", "gcr.io/10"]);
    // Alone with it of two nodes: 4000 MB / 2 = 2000 MB, the two containers' maximum.
    assert_eq!(scores(big(), cluster.clone()), [100, 0]);

    // node2 pulls it too: both have it, each scaled by 2/2.
    cluster.upsert_node(
        NodeBuilder::new("node2", "amd64")
            .image(&["gcr.io/4000:latest"], 4000 * MB)
            .info(),
    );
    assert_eq!(scores(big(), cluster.clone()), [100, 100]);

    // node1 removes it (a new report without it): only node2 has it, scaled by 1/2.
    cluster.upsert_node(
        NodeBuilder::new("node1", "amd64")
            .image(&["gcr.io/30:latest"], 30 * MB)
            .info(),
    );
    let after = scores(big(), cluster.clone());
    assert_eq!(after[cluster.node_index("node1").unwrap()], 0);
    assert_eq!(after[cluster.node_index("node2").unwrap()], 100);

    // A third node without images dilutes the spread: 4000 * 1/3 = 1333 MB -> 66.
    cluster.upsert_node(NodeBuilder::new("node3", "amd64").info());
    let three = scores(big(), cluster.clone());
    assert_eq!(three[cluster.node_index("node2").unwrap()], 66);

    // node2 goes: no node has the image, nothing scores and its name is forgotten.
    cluster.remove_node("node2");
    assert_eq!(scores(big(), cluster.clone()), [0, 0]);
    assert_eq!(cluster.image_states().summary("gcr.io/4000:latest"), None);
    assert_eq!(cluster.image_states().len(), 1, "only gcr.io/30:latest");
}

#[test]
fn a_node_updated_without_images_loses_them() {
    let mut cluster = cluster(&[("node1", NODE_4000_30)]);
    cluster.upsert_node(NodeBuilder::new("node1", "amd64").info());
    assert!(cluster.image_states().is_empty());
    assert!(cluster.node("node1").unwrap().images.ids().is_empty());
}
