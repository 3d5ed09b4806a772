//! kube-scheduler's `default_preemption_test.go` in its essentials, and the situations
//! recorded from kube-scheduler 1.36 on a real API server (same messages).

use std::{collections::HashMap, sync::Arc, time::Instant};

use k8s_openapi::{api::core::v1 as core_api, apimachinery::pkg::apis::meta::v1 as meta};
use multiarch_plugins::{
    model::{
        disruption_budget::DisruptionBudget,
        node::NodeBuilder,
        pod::{PodBuilder, PodInfo},
    },
    profile::Profile,
};
use multiarch_policy::platform::Platform;
use multiarch_policy::selectors::LabelSelector;

use crate::engine::outcome::{FailureKind, Nomination, Outcome};
use crate::engine::placement_inputs::PlacementInputs;
use crate::engine::{image_source::CatalogImages, scheduler::SchedulerCore};

const SCHED: &str = "multiarch-scheduler";

fn catalog() -> CatalogImages {
    let mut images = HashMap::new();
    let all: Arc<[Platform]> = ["amd64", "arm64", "ppc64le", "s390x"]
        .iter()
        .map(|a| Platform::linux(a))
        .collect::<Vec<_>>()
        .into();
    images.insert("app:1".to_owned(), all.clone());
    images.insert("registry.example/app:1".to_owned(), all.clone());
    images.insert(
        "amd-only:1".to_owned(),
        vec![Platform::linux("amd64")].into(),
    );
    CatalogImages { images }
}

/// Nodes `(name, arch)` with 4 cpu each.
fn core_with(nodes: &[(&str, &str)]) -> SchedulerCore {
    let mut core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 7);
    let now = Instant::now();
    for (name, arch) in nodes {
        core.apply_node(
            NodeBuilder::new(name, arch)
                .capacity("4", "32Gi", 110)
                .info(),
            now,
        );
    }
    core
}

/// A pod bound to `node` (any scheduler), started at `started` seconds.
fn running(name: &str, node: &str, priority: i32, cpu: &str, started: i64) -> PodInfo {
    PodBuilder::new("preempt", name)
        .priority(priority)
        .node(node)
        .started(started)
        .container("c0", "app:1", cpu, "500Mi")
        .info()
}

fn pending(name: &str, priority: i32, cpu: &str) -> PodBuilder {
    PodBuilder::new("preempt", name)
        .scheduler(SCHED)
        .priority(priority)
        .container("c0", "app:1", cpu, "500Mi")
}

fn recorded_events(file: &str) -> Vec<serde_json::Value> {
    let path = format!(
        "{}/../tests/fixtures/kube-scheduler/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    let list: serde_json::Value = serde_json::from_str(&text).unwrap();
    list["items"].as_array().unwrap().clone()
}

fn recorded_note(file: &str, reason: &str, pod: &str) -> String {
    recorded_events(file)
        .into_iter()
        .find(|e| e["reason"] == reason && e["regarding"]["name"] == pod)
        .and_then(|e| e["note"].as_str().map(str::to_owned))
        .unwrap()
}

fn no_disruption(namespace: &str, label: (&str, &str)) -> DisruptionBudget {
    DisruptionBudget {
        namespace: namespace.into(),
        name: "protect".into(),
        selector: Some(LabelSelector::from_labels(
            &[(label.0.to_owned(), label.1.to_owned())].into(),
        )),
        disruptions_allowed: 0,
        disrupted: vec![],
    }
}

/// The recorded situation: both ppc64le nodes are full of `low` pods, one protected by a
/// PodDisruptionBudget; a `high` pod pinned to ppc64le evicts the other one and lands on
/// its node next.
#[test]
fn the_recorded_preemption() {
    let mut core = core_with(&[
        ("rec-amd64-0", "amd64"),
        ("rec-amd64-1", "amd64"),
        ("rec-ppc64le-0", "ppc64le"),
        ("rec-ppc64le-1", "ppc64le"),
    ]);
    let now = Instant::now();
    let mut low0 = running("low0", "rec-ppc64le-0", 10, "3800m", 100);
    Arc::make_mut(&mut low0.labels).insert("pdb".into(), "yes".into());
    core.apply_pod(low0, now);
    core.apply_pod(running("low1", "rec-ppc64le-1", 10, "3800m", 100), now);
    core.apply_disruption_budget(no_disruption("preempt", ("pdb", "yes")));
    core.apply_pod(
        pending("high", 100_000, "1")
            .node_selector("kubernetes.io/arch", "ppc64le")
            .info(),
        now,
    );
    let Some(Outcome::Failed {
        message,
        kind,
        nomination,
        preemption: Some(preemption),
        ..
    }) = core.schedule_next(&catalog(), now)
    else {
        panic!("no preemption");
    };
    assert_eq!(kind, FailureKind::Unschedulable);
    assert_eq!(
        message,
        recorded_note("preemption-events.json", "FailedScheduling", "high")
    );
    assert_eq!(preemption.node, "rec-ppc64le-1");
    assert_eq!(nomination, Nomination::Set("rec-ppc64le-1".into()));
    let victims: Vec<&str> = preemption.victims.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(victims, ["low1"]);
    // Not retried while its victims are evicted.
    assert!(core.schedule_next(&catalog(), now).is_none());
    // A pod of lower priority cannot take the room made for `high`.
    core.apply_pod(pending("sneaky", 50, "1").info(), now);
    core.delete_pod(&preemption.victims[0].uid, now);
    core.preemption_done("uid-preempt-high", true, now);
    match core.schedule_next(&catalog(), now) {
        Some(Outcome::Scheduled { pod, node, .. }) => {
            assert_eq!(
                (pod.name.as_str(), node.as_str()),
                ("high", "rec-ppc64le-1")
            );
        }
        other => panic!("{other:?}"),
    }
    match core.schedule_next(&catalog(), now) {
        Some(Outcome::Scheduled { pod, node, .. }) => {
            assert_eq!(pod.name, "sneaky");
            assert!(node.starts_with("rec-amd64"), "{node}");
        }
        other => panic!("{other:?}"),
    }
}

/// kube-scheduler's candidate order: fewest budget violations, lowest highest priority,
/// lowest priority sum, fewest victims, latest start.
#[test]
fn the_cheapest_node_is_chosen() {
    struct Case {
        name: &'static str,
        /// Per node: `(priority, cpu, started)` of its pods.
        nodes: [&'static [(i32, &'static str, i64)]; 2],
        pod_cpu: &'static str,
        want_node: &'static str,
        want_victims: usize,
    }
    let cases = [
        Case {
            name: "lower priority victims",
            nodes: [&[(20, "4", 0)], &[(10, "4", 0)]],
            pod_cpu: "3",
            want_node: "n1",
            want_victims: 1,
        },
        Case {
            name: "fewer victims at equal priority",
            nodes: [&[(10, "1500m", 0), (10, "1500m", 0)], &[(10, "4", 0)]],
            pod_cpu: "3",
            want_node: "n1",
            want_victims: 1,
        },
        Case {
            name: "lower priorities beat fewer victims; only what is needed goes",
            nodes: [&[(10, "1", 0), (10, "1", 0), (10, "2", 0)], &[(30, "4", 0)]],
            pod_cpu: "3",
            want_node: "n0",
            want_victims: 2,
        },
        Case {
            name: "latest start among equals",
            nodes: [&[(10, "4", 1000)], &[(10, "4", 500)]],
            pod_cpu: "3",
            want_node: "n0",
            want_victims: 1,
        },
        Case {
            name: "a higher-priority pod stays",
            nodes: [&[(10, "2", 0), (1000, "2", 0)], &[(500, "4", 0)]],
            pod_cpu: "2",
            want_node: "n0",
            want_victims: 1,
        },
    ];
    for case in cases {
        let mut core = core_with(&[("n0", "amd64"), ("n1", "amd64")]);
        let now = Instant::now();
        for (n, pods) in case.nodes.iter().enumerate() {
            for (i, (priority, cpu, started)) in pods.iter().enumerate() {
                core.apply_pod(
                    running(
                        &format!("p{n}{i}"),
                        &format!("n{n}"),
                        *priority,
                        cpu,
                        *started,
                    ),
                    now,
                );
            }
        }
        core.apply_pod(pending("high", 100, case.pod_cpu).info(), now);
        let Some(Outcome::Failed {
            preemption: Some(preemption),
            ..
        }) = core.schedule_next(&catalog(), now)
        else {
            panic!("{}: no preemption", case.name);
        };
        assert_eq!(preemption.node, case.want_node, "{}", case.name);
        assert_eq!(preemption.victims.len(), case.want_victims, "{}", case.name);
    }
}

#[test]
fn a_budget_protects_its_pod_when_another_choice_exists() {
    let mut core = core_with(&[("n0", "amd64"), ("n1", "amd64")]);
    let now = Instant::now();
    let mut protected = running("protected", "n0", 1, "4", 0);
    Arc::make_mut(&mut protected.labels).insert("app".into(), "db".into());
    core.apply_pod(protected, now);
    core.apply_pod(running("free", "n1", 10, "4", 0), now);
    core.apply_disruption_budget(no_disruption("preempt", ("app", "db")));
    core.apply_pod(pending("high", 100, "2").info(), now);
    let Some(Outcome::Failed {
        preemption: Some(preemption),
        ..
    }) = core.schedule_next(&catalog(), now)
    else {
        panic!("no preemption");
    };
    // Despite its higher priority, the unprotected pod goes.
    assert_eq!(preemption.victims[0].name, "free");
}

#[test]
fn preemption_never_and_hopeless_nodes_say_why() {
    let mut core = core_with(&[("amd", "amd64"), ("arm", "arm64")]);
    let now = Instant::now();
    core.apply_pod(running("low-amd", "amd", 1, "4", 0), now);
    core.apply_pod(running("low-arm", "arm", 1, "4", 0), now);
    core.apply_pod(pending("polite", 100, "2").preemption_never().info(), now);
    let Some(Outcome::Failed {
        message,
        preemption,
        ..
    }) = core.schedule_next(&catalog(), now)
    else {
        panic!("scheduled");
    };
    assert!(preemption.is_none());
    assert_eq!(
        message,
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, preemption: \
         not eligible due to preemptionPolicy=Never."
    );

    // An amd64-only image: the arm64 node is hopeless, the amd64 node holds a pod of
    // higher priority.
    let mut core = core_with(&[("amd", "amd64"), ("arm", "arm64")]);
    core.apply_pod(running("important", "amd", 1000, "4", 0), now);
    core.apply_pod(running("low-arm", "arm", 1, "4", 0), now);
    core.apply_pod(
        PodBuilder::new("preempt", "x")
            .scheduler(SCHED)
            .priority(100)
            .container("c0", "amd-only:1", "2", "")
            .info(),
        now,
    );
    let Some(Outcome::Failed {
        message,
        preemption,
        ..
    }) = core.schedule_next(&catalog(), now)
    else {
        panic!("scheduled");
    };
    assert!(
        preemption.is_none(),
        "the arm64 pod must never be evicted for it"
    );
    assert_eq!(
        message,
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match the pod's image \
         architectures (images support amd64). no new claims to deallocate, preemption: 0/2 \
         nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is \
         not helpful for scheduling."
    );
}

#[test]
fn a_terminating_victim_on_the_nominated_node_means_wait() {
    let mut core = core_with(&[("n0", "amd64")]);
    let now = Instant::now();
    let victim = running("low", "n0", 1, "4", 0);
    core.apply_pod(victim.clone(), now);
    core.apply_pod(pending("high", 100, "2").info(), now);
    let Some(Outcome::Failed {
        preemption: Some(_),
        ..
    }) = core.schedule_next(&catalog(), now)
    else {
        panic!("no preemption");
    };
    core.preemption_done("uid-preempt-high", true, now);
    // The eviction was accepted: the victim terminates (deletionTimestamp set).
    let mut terminating = victim;
    terminating.deleting = true;
    terminating.resource_version = "9".into();
    core.apply_pod(terminating, now);
    let Some(Outcome::Failed {
        message,
        preemption,
        nomination,
        ..
    }) = core.schedule_next(&catalog(), now)
    else {
        panic!("scheduled");
    };
    assert!(preemption.is_none());
    assert_eq!(nomination, Nomination::Unchanged);
    assert!(
        message
            .ends_with("preemption: not eligible due to a terminating pod on the nominated node."),
        "{message}"
    );
    // Once it is gone, the pod lands where room was made (after its backoff).
    let later = now + std::time::Duration::from_secs(30);
    core.delete_pod("uid-preempt-low", later);
    core.tick(later);
    match core.schedule_next(&catalog(), later) {
        Some(Outcome::Scheduled { node, .. }) => assert_eq!(node, "n0"),
        other => panic!("{other:?}"),
    }
}

/// The recorded situation: a required anti-affinity term selecting pods in namespaces
/// labelled team=x keeps `y` (team-b) off the only node its selector allows; the solo pod
/// has the same priority, so nothing can be evicted.
#[test]
fn the_recorded_cross_namespace_anti_affinity() {
    let mut core = core_with(&[
        ("rec-amd64-0", "amd64"),
        ("rec-amd64-1", "amd64"),
        ("rec-ppc64le-0", "ppc64le"),
        ("rec-ppc64le-1", "ppc64le"),
    ]);
    let now = Instant::now();
    core.apply_namespace("team-a", [("team".to_owned(), "x".to_owned())].into(), now);
    core.apply_namespace("team-b", Default::default(), now);
    core.apply_pod(
        PodBuilder::new("team-a", "solo")
            .label("app", "solo")
            .node("rec-amd64-0")
            .container("c0", "app:1", "100m", "500Mi")
            .info(),
        now,
    );
    let recorded: core_api::Pod = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/../tests/fixtures/kube-scheduler/cross-namespace-anti-affinity-pod.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    let mut y = PodInfo::from_pod(&recorded).unwrap();
    assert!(meta::LabelSelector::default().match_labels.is_none());
    y.scheduler_name = SCHED.into();
    core.apply_pod(y, now);
    let Some(Outcome::Failed { message, .. }) = core.schedule_next(&catalog(), now) else {
        panic!("scheduled");
    };
    assert_eq!(
        message,
        recorded_note(
            "cross-namespace-anti-affinity-events.json",
            "FailedScheduling",
            "y"
        )
    );
}
