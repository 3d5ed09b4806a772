//! The webhook, the gate controller and the scheduler leave the same pods alone: each
//! calls the one definition in `multiarch_plugins::exemption`, and this table proves they
//! agree on every case. The webhook neither routes nor gates an exempt pod; the gate
//! controller removes its gate from one without writing an affinity; the scheduler places
//! a pod that names it (it opted in) unless it is placed already.

#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::Pod;
use multiarch_admission::{
    gate::process::{GateInputs, Inspection, process},
    webhook::decision::{WebhookConfig, decide},
};
use multiarch_crd::PlacementMode;
use multiarch_plugins::{model::pod::PodInfo, profile::Profile};
use multiarch_policy::architecture_rules::ArchitectureRules;
use multiarch_policy::exemption::{Exemption, exemption};
use multiarch_policy::platform::Platform;
use multiarch_scheduler::engine::placement_inputs::PlacementInputs;
use multiarch_scheduler::engine::scheduler::SchedulerCore;
use serde_json::{Value, json};

const OWN: &str = "multiarch";

fn pod(namespace: &str, edit: impl Fn(&mut Value)) -> Value {
    let mut pod = json!({
        "metadata": {"name": "p", "namespace": namespace, "uid": "u-1", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "quay.io/shop/web:1"}]},
    });
    edit(&mut pod);
    pod
}

/// The pod with `spec.<field>` set.
fn with(mut pod: Value, field: &str, value: Value) -> Pod {
    pod["spec"][field] = value;
    serde_json::from_value(pod).unwrap()
}

/// `(case, pod, expected exemption)`.
fn cases() -> Vec<(&'static str, Value, Option<Exemption>)> {
    vec![
        ("an ordinary pod", pod("shop", |_| {}), None),
        (
            "kube-system",
            pod("kube-system", |_| {}),
            Some(Exemption::SystemNamespace),
        ),
        (
            "kube-public",
            pod("kube-public", |_| {}),
            Some(Exemption::SystemNamespace),
        ),
        (
            "multiarch's namespace",
            pod(OWN, |_| {}),
            Some(Exemption::OwnNamespace),
        ),
        (
            "a bound pod",
            pod("shop", |p| p["spec"]["nodeName"] = json!("node-1")),
            Some(Exemption::NodeName),
        ),
        (
            "a DaemonSet's pod",
            pod("shop", |p| {
                p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                    "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": true}]);
            }),
            Some(Exemption::DaemonSet),
        ),
        (
            "a ReplicaSet's pod",
            pod("shop", |p| {
                p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1",
                    "kind": "ReplicaSet", "name": "rs", "uid": "r", "controller": true}]);
            }),
            None,
        ),
        (
            "pinned to control-plane nodes",
            pod("shop", |p| {
                p["spec"]["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""});
            }),
            Some(Exemption::ControlPlane),
        ),
        (
            "opted out",
            pod("shop", |p| {
                p["metadata"]["labels"]["multiarch.openshift.io/scheduler"] = json!("default");
            }),
            Some(Exemption::OptOut),
        ),
    ]
}

fn webhook_config(mode: PlacementMode) -> WebhookConfig {
    WebhookConfig::new(mode, "multiarch-scheduler", OWN)
}

/// The webhook's decision on the pod as the API server hands it over (default scheduler).
fn webhook(object: &Value, mode: PlacementMode) -> (Option<Exemption>, bool) {
    let pod = with(object.clone(), "schedulerName", json!("default-scheduler"));
    let namespace = object["metadata"]["namespace"].as_str().unwrap();
    let decision = decide(&pod, namespace, &webhook_config(mode));
    let changes_placement = decision.patch.iter().any(|op| {
        op["path"] == "/spec/schedulerName"
            || op["path"]
                .as_str()
                .unwrap()
                .starts_with("/spec/schedulingGates")
    });
    (decision.exemption, changes_placement)
}

/// Whether the gate controller writes an architecture affinity into the pod once gated.
fn gate_controller_places(object: &Value) -> bool {
    let gated = with(
        object.clone(),
        "schedulingGates",
        json!([{"name": "multiarch.openshift.io/scheduling-gate"}]),
    );
    let none = multiarch_policy::pod_configs::NamespacedConfigs::default();
    let inputs = GateInputs {
        cluster_plugins: None,
        configs: &none,
        fallback_architecture: None,
        own_namespace: OWN,
        max_attempts: 3,
        architecture_rules: ArchitectureRules::none(),
    };
    let platforms = vec![Platform::new("linux", "amd64", None)];
    let processed = process(&gated, &inputs, Inspection::Compatible(platforms)).unwrap();
    let gate_removed = processed
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_none_or(Vec::is_empty);
    assert!(
        gate_removed,
        "the gate controller never keeps the gate of a pod it is done with"
    );
    processed
        .pod
        .spec
        .and_then(|s| s.affinity)
        .and_then(|a| a.node_affinity)
        .is_some()
}

/// Whether the scheduler places the pod when the pod names it.
fn scheduler_places(object: &Value) -> bool {
    let pod = with(
        object.clone(),
        "schedulerName",
        json!("multiarch-scheduler"),
    );
    let core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
    core.responsible_for(&PodInfo::from_pod(&pod).unwrap())
}

#[test]
fn the_three_paths_agree_on_every_case() {
    for (case, object, expected) in cases() {
        let pod: Pod = serde_json::from_value(object.clone()).unwrap();
        let namespace = object["metadata"]["namespace"].as_str().unwrap();
        assert_eq!(
            exemption(&pod, namespace, OWN),
            expected,
            "{case}: the definition"
        );

        let (routed_exemption, routed) = webhook(&object, PlacementMode::Scheduler);
        assert_eq!(routed_exemption, expected, "{case}: scheduler-mode webhook");
        assert_eq!(routed, expected.is_none(), "{case}: routed");

        let (gated_exemption, gated) = webhook(&object, PlacementMode::SchedulingGate);
        assert_eq!(gated_exemption, expected, "{case}: gate-mode webhook");
        assert_eq!(gated, expected.is_none(), "{case}: gated");

        assert_eq!(
            gate_controller_places(&object),
            expected.is_none(),
            "{case}: gate controller"
        );
        assert_eq!(
            scheduler_places(&object),
            expected != Some(Exemption::NodeName),
            "{case}: scheduler"
        );
    }
}

#[test]
fn only_routing_cares_about_other_schedulers() {
    let object = pod("shop", |p| p["spec"]["schedulerName"] = json!("volcano"));
    let pod: Pod = serde_json::from_value(object.clone()).unwrap();
    assert_eq!(exemption(&pod, "shop", OWN), None);
    let decision = decide(&pod, "shop", &webhook_config(PlacementMode::Scheduler));
    assert_eq!(decision.exemption, Some(Exemption::OtherScheduler));
    assert!(decision.patch.is_empty());
    let core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
    assert!(!core.responsible_for(&PodInfo::from_pod(&pod).unwrap()));
}

/// Routing safety: one definition (`multiarch_plugins::routing`) decides both that the
/// webhook keeps a pod with the default scheduler (and gates it) and that the scheduler
/// refuses it by name when it is named anyway.
#[test]
fn the_webhook_never_routes_what_the_scheduler_refuses() {
    use multiarch_plugins::{
        framework::{Code, CycleContext, CycleState, PreFilterPlugin},
        image_platforms::PodImagePlatforms,
        model::{cluster::ClusterState, nominated::NominatedPods},
        plugins::unsupported_features::UnsupportedFeatures,
    };
    let claims = json!([{"name": "gpu", "resourceClaimTemplateName": "gpu"}]);
    let cases = [
        ("resource claims", Some(claims)),
        ("no resource claims", None),
    ];
    for (case, resource_claims) in cases {
        let mut object = pod("shop", |_| {});
        if let Some(claims) = &resource_claims {
            object["spec"]["resourceClaims"] = claims.clone();
        }
        let pod = with(object.clone(), "schedulerName", json!("default-scheduler"));
        let decision = decide(&pod, "shop", &webhook_config(PlacementMode::Scheduler));
        let routed = decision
            .patch
            .iter()
            .any(|op| op["path"] == "/spec/schedulerName");
        let named = PodInfo::from_pod(&with(object, "schedulerName", json!("multiarch-scheduler")))
            .unwrap();
        let cluster = ClusterState::new();
        let nominated = NominatedPods::default();
        let ctx = CycleContext {
            pod: &named,
            cluster: &cluster,
            images: &PodImagePlatforms::default(),
            arch_preferences: &[],
            fallback_architecture: None,
            architecture_rule: None,
            nominated: &nominated,
            unknown_node_level: multiarch_crd::UnknownNodeLevel::AnyLevel,
        };
        let refused = UnsupportedFeatures
            .pre_filter(&ctx, &mut CycleState::new())
            .code
            == Code::UnschedulableAndUnresolvable;
        assert_eq!(routed, !refused, "{case}");
        assert_eq!(decision.gated, refused, "{case}: gated instead");
        assert_eq!(
            decision.unsupported,
            named.extras().unsupported.to_vec(),
            "{case}"
        );
    }
}
