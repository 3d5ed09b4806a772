//! The status in the states users see most.

use std::{collections::BTreeMap, time::Instant};

use k8s_openapi::jiff::Timestamp;
use multiarch_crd::PlacementMode;

use super::*;
use crate::{
    clocks::Expired,
    component::{Component, Rollout},
    decide::{Left, decide},
};
use multiarch_crd::names::FINALIZER_POD_PLACEMENT;

fn observed(available: &[Component], routing: Option<PlacementMode>) -> Snapshot {
    let mut o = Snapshot {
        deleting: false,
        finalizers: vec![FINALIZER_POD_PLACEMENT.into()],
        rollouts: BTreeMap::new(),
        route_configured: routing.is_some(),
        routing,
        seen_at: Instant::now(),
        deployed_scheduler: None,
        waiting: BTreeMap::new(),
        gated: Vec::new(),
        reports: Vec::new(),
        misplaced_pods: None,
        apis: Default::default(),
        pod_placement_configs: Some(Vec::new()),
        journal: Vec::new(),
        unread: Vec::new(),
    };
    for c in available {
        o.rollouts.insert(
            *c,
            Rollout {
                exists: true,
                available: true,
                rolled_out: true,
                detail: "2 of 2 replicas available".into(),
            },
        );
    }
    o
}

fn find<'a>(s: &'a ClusterPodPlacementConfigStatus, t: &str) -> &'a Condition {
    s.conditions.iter().find(|c| c.type_ == t).unwrap()
}

fn compute(
    spec: &ClusterPodPlacementConfigSpec,
    o: &Snapshot,
    previous: Option<&ClusterPodPlacementConfigStatus>,
    now: i64,
) -> ClusterPodPlacementConfigStatus {
    compute_with(spec, o, previous, now, &[])
}

fn compute_with(
    spec: &ClusterPodPlacementConfigSpec,
    o: &Snapshot,
    previous: Option<&ClusterPodPlacementConfigStatus>,
    now: i64,
    failures: &[String],
) -> ClusterPodPlacementConfigStatus {
    let p = decide(spec, o, &Expired::none());
    of(&Inputs {
        spec,
        generation: 3,
        plan: &p,
        snapshot: o,
        failures,
        ungated_left: Left::default(),
        recreated_left: Left::default(),
        architectures: vec!["amd64".into(), "arm64".into()],
        previous,
        now: Time(Timestamp::from_second(now).unwrap()),
    })
}

#[test]
fn all_ready_is_mto_s_healthy_steady_state() {
    use Component::*;
    let spec = ClusterPodPlacementConfigSpec::default();
    let o = observed(
        &[Inspector, Webhook, GateController, Scheduler],
        Some(PlacementMode::Scheduler),
    );
    let s = compute(&spec, &o, None, 1000);
    for (t, want) in [
        (AVAILABLE, "True"),
        (PROGRESSING, "False"),
        (DEGRADED, "False"),
        (DEPROVISIONING, "False"),
        (POD_PLACEMENT_CONTROLLER_NOT_ROLLED_OUT, "False"),
        (POD_PLACEMENT_WEBHOOK_NOT_ROLLED_OUT, "False"),
        (MUTATING_WEBHOOK_CONFIGURATION_NOT_AVAILABLE, "False"),
        (SCHEDULER_NOT_ROLLED_OUT, "False"),
    ] {
        assert_eq!(find(&s, t).status, want, "{t}");
        assert_eq!(find(&s, t).observed_generation, Some(3));
    }
    assert_eq!(find(&s, AVAILABLE).reason, "AllComponentsReady");
    assert_eq!(s.routing, Some(Routing::Scheduler));
    assert_eq!(s.observed_generation, Some(3));
    // Unchanged status keeps its transition times.
    let again = compute(&spec, &o, Some(&s), 2000);
    assert_eq!(again, s);
}

#[test]
fn a_failed_step_degrades_a_working_install_without_turning_routing_off() {
    use Component::*;
    let spec = ClusterPodPlacementConfigSpec::default();
    let o = observed(
        &[Inspector, Webhook, GateController, Scheduler],
        Some(PlacementMode::Scheduler),
    );
    let failure =
        "apply an operand: MutatingWebhookConfiguration multiarch-webhook: refused".to_owned();
    let s = compute_with(&spec, &o, None, 1000, &[failure]);
    assert_eq!(find(&s, AVAILABLE).status, "True");
    let degraded = find(&s, DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "Degraded")
    );
    assert_eq!(
        degraded.message,
        "Some of the operator's work failed (the rest went on; it is retried): apply an operand: MutatingWebhookConfiguration multiarch-webhook: refused."
    );
}

#[test]
fn a_missing_scheduler_is_degraded_in_words() {
    use Component::*;
    let spec = ClusterPodPlacementConfigSpec::default();
    let mut o = observed(&[Inspector, Webhook, GateController], None);
    o.rollouts.insert(
        Scheduler,
        Rollout {
            exists: true,
            available: false,
            rolled_out: false,
            detail: "Deployment multiarch/multiarch-scheduler has 0 of 2 replicas available".into(),
        },
    );
    let s = compute(&spec, &o, None, 1000);
    let degraded = find(&s, DEGRADED);
    assert_eq!(degraded.status, "True");
    assert_eq!(
        degraded.message,
        "Pods are not placed by architecture: the scheduler is not available: Deployment multiarch/multiarch-scheduler has 0 of 2 replicas available. New pods go to the default scheduler unchanged meanwhile."
    );
    assert_eq!(
        find(&s, AVAILABLE).reason,
        "SchedulerNotRolledOutMutatingWebhookConfigurationNotAvailable"
    );
    assert_eq!(s.routing, Some(Routing::Off));
}

#[test]
fn an_uninstall_says_what_it_waits_for_and_what_its_releases_left() {
    use crate::{decide::Release, pod_ref::PodRef};
    let spec = ClusterPodPlacementConfigSpec::default();
    let mut o = observed(&[Component::Inspector, Component::Webhook], None);
    o.deleting = true;
    let pod = PodRef {
        namespace: "locked".into(),
        name: "batch".into(),
        uid: "u".into(),
    };
    o.waiting.insert("multiarch-scheduler".into(), vec![pod]);
    let plan = decide(&spec, &o, &Expired::none());
    assert!(matches!(
        &plan.stage,
        crate::decide::Stage::Uninstalling(w) if w.iter().any(|w| matches!(w, crate::decide::Wait::Released { how: Release::Recreate, pods: 1 }))
    ));
    let s = of(&Inputs {
        spec: &spec,
        generation: 1,
        plan: &plan,
        snapshot: &o,
        failures: &[],
        ungated_left: Left::default(),
        recreated_left: Left {
            refused: 1,
            failed: 0,
        },
        architectures: Vec::new(),
        previous: None,
        now: Time(Timestamp::from_second(1).unwrap()),
    });
    let deprovisioning = find(&s, DEPROVISIONING);
    assert_eq!(deprovisioning.status, "True");
    assert_eq!(
        deprovisioning.message,
        "multiarch is being uninstalled: waiting for admission reviews already under way to finish (15 s) before the last look for pods still gated or routed; 1 pending pods the API server refuses to create again (see their events: delete them, or allow their creation)"
    );
    assert_eq!(find(&s, AVAILABLE).status, "False");
    assert_eq!(s.routing, Some(Routing::Off));
}
