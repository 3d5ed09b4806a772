//! What the admission webhook does to a new pod, as a minimal JSONPatch: route it to the
//! multiarch scheduler (scheduler mode) or gate it for the gate controller (MTO's gate
//! mode, and in scheduler mode the pods using a feature the scheduler does not place).
//! Pure: tested on recorded AdmissionReviews.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use multiarch_crd::{
    ClusterPlugins, PlacementMode,
    names::{
        LABEL_NODE_AFFINITY, LABEL_PREFERRED_NODE_AFFINITY, LABEL_SCHEDULING_GATE, SCHEDULING_GATE,
    },
};
use multiarch_policy::{
    architecture_rules::{ArchitectureDecision, ArchitectureRules, RuleSubject},
    exemption::{Exemption, architecture_set, exemption, names_other_scheduler},
    pod_configs::NamespacedConfigs,
    preferences::preferences_apply,
    routing::{self, Unsupported},
};
use multiarch_runtime::device_classes::DeviceClasses;
use serde_json::{Value, json};

/// What the webhook knows when a pod arrives.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    pub mode: PlacementMode,
    pub scheduler_name: String,
    /// multiarch's own namespace: never routed or gated.
    pub own_namespace: String,
    /// `nodeAffinityScoring` is enabled in the ClusterPodPlacementConfig (gate mode adds
    /// preferred affinity then, and labels the pod for it).
    pub preferences_enabled: bool,
    /// Every PodPlacementConfig (gate mode: one that selects the pod and enables
    /// `nodeAffinityScoring` has the same effect for that pod).
    pub pod_configs: NamespacedConfigs,
    /// The ClusterPodPlacementConfig's plugins (its `nodeAffinityScoring` weights).
    pub cluster_plugins: Option<ClusterPlugins>,
    /// Scheduler mode: write the architecture constraint into routed pods whose image
    /// platforms are known in time (`spec.placement.admissionAffinity`).
    pub admission_affinity: bool,
    /// The mode is known: pinned, or the placement configuration has been read. Until
    /// then the webhook is not ready and admits pods unchanged (routing a pod on a
    /// gate-mode cluster to a scheduler that may not run would strand it).
    pub known: bool,
    /// The PodPlacementConfigs' `celArchitecturePlacement` rules, compiled.
    pub architecture_rules: Arc<ArchitectureRules>,
    /// The extended resources the cluster's DeviceClasses map: a pod asking for one is
    /// not routed to the scheduler. Until they are read (`synced`) the webhook is not
    /// ready and admits pods unchanged.
    pub device_classes: Arc<DeviceClasses>,
}

impl WebhookConfig {
    /// Scheduler mode (unless `mode` says otherwise), no preferences, admission affinity on.
    pub fn new(mode: PlacementMode, scheduler_name: &str, own_namespace: &str) -> Self {
        WebhookConfig {
            mode,
            scheduler_name: scheduler_name.to_owned(),
            own_namespace: own_namespace.to_owned(),
            preferences_enabled: false,
            pod_configs: NamespacedConfigs::default(),
            cluster_plugins: None,
            admission_affinity: true,
            known: true,
            architecture_rules: Arc::default(),
            // Nothing followed: no DeviceClass is known to map anything.
            device_classes: Arc::new(DeviceClasses {
                synced: true,
                ..DeviceClasses::default()
            }),
        }
    }

    /// Why pods are admitted unchanged for now: what has not been read yet.
    pub fn not_ready(&self) -> Option<&'static str> {
        if !self.known {
            Some("the placement configuration has not been read yet")
        } else if !self.device_classes.synced {
            Some("the DeviceClasses have not been read yet")
        } else {
            None
        }
    }

    /// What the rules decide for a pod routed or gated at admission. A pod created from
    /// `generateName` has no name yet: the rules see its `generateName`, the prefix its
    /// name will have.
    fn architecture_rule(&self, pod: &Pod, namespace: &str) -> Option<ArchitectureDecision> {
        if !self.architecture_rules.governs_namespace(namespace) {
            return None;
        }
        let meta = &pod.metadata;
        let name = meta
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or(meta.generate_name.as_deref())
            .unwrap_or_default();
        self.architecture_rules
            .decide(RuleSubject::of(meta, name, namespace))
    }

    /// Whether the gate controller will add preferred affinity to this pod.
    fn preferences_for(&self, pod: &Pod, namespace: &str) -> bool {
        self.preferences_enabled
            || preferences_apply(
                namespace,
                pod.metadata.labels.as_ref().unwrap_or(&Default::default()),
                &self.pod_configs,
                None,
            )
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// RFC 6902 operations (empty: admit unchanged).
    pub patch: Vec<Value>,
    pub exemption: Option<Exemption>,
    /// Gate mode: the gate was added (the gate-added event is due once the pod exists).
    pub gated: bool,
    /// Scheduler mode: features the scheduler does not place, so the pod stays with the
    /// default scheduler and takes the gate path.
    pub unsupported: Vec<Unsupported>,
    /// The `celArchitecturePlacement` decision for a routed or gated pod: its own
    /// architecture constraint is replaced by the rule's (see `architecture_rule`).
    pub architecture_rule: Option<ArchitectureDecision>,
}

impl Decision {
    /// Scheduler mode sent the pod to the multiarch scheduler.
    pub fn routed(&self) -> bool {
        !self.patch.is_empty() && !self.gated && self.exemption.is_none()
    }
}

/// `/` and `~` escaped for a JSON pointer.
fn pointer(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

pub fn decide(pod: &Pod, namespace: &str, config: &WebhookConfig) -> Decision {
    let exempt = exemption(pod, namespace, &config.own_namespace);
    match config.mode {
        PlacementMode::Scheduler => {
            if exempt.is_some() {
                return Decision {
                    patch: Vec::new(),
                    exemption: exempt,
                    gated: false,
                    unsupported: Vec::new(),
                    architecture_rule: None,
                };
            }
            if names_other_scheduler(pod) {
                return Decision {
                    patch: Vec::new(),
                    exemption: Some(Exemption::OtherScheduler),
                    gated: false,
                    unsupported: Vec::new(),
                    architecture_rule: None,
                };
            }
            // Never routed to a scheduler that cannot place it: the default scheduler
            // keeps it, with an architecture constraint from the gate path.
            let unsupported = pod
                .spec
                .as_ref()
                .map(|spec| routing::unsupported(spec, &config.device_classes.resources))
                .unwrap_or_default();
            if !unsupported.is_empty() {
                return Decision {
                    unsupported,
                    ..gate(pod, namespace, exempt, config)
                };
            }
            // The API server defaults the name before mutating webhooks see the pod; a
            // pod without one (older servers, tests) gets it added.
            let op = match pod.spec.as_ref().and_then(|s| s.scheduler_name.as_ref()) {
                Some(_) => "replace",
                None => "add",
            };
            Decision {
                patch: vec![
                    json!({"op": op, "path": "/spec/schedulerName", "value": config.scheduler_name}),
                ],
                exemption: None,
                gated: false,
                unsupported: Vec::new(),
                architecture_rule: config.architecture_rule(pod, namespace),
            }
        }
        PlacementMode::SchedulingGate => gate(pod, namespace, exempt, config),
    }
}

/// MTO's webhook: labels always, the gate unless the pod is ignored. Pods in system
/// namespaces and multiarch's own are never gated but are labelled `not-set` as MTO's
/// webhook labels them (its users' tooling reads the labels); a pod that opted out is
/// left alone.
fn gate(pod: &Pod, namespace: &str, exempt: Option<Exemption>, config: &WebhookConfig) -> Decision {
    if matches!(exempt, Some(Exemption::OptOut)) {
        return Decision {
            patch: Vec::new(),
            exemption: exempt,
            gated: false,
            unsupported: Vec::new(),
            architecture_rule: None,
        };
    }
    let preferences = config.preferences_for(pod, namespace);
    // A rule replaces the pod's own architecture constraint, so that constraint does not
    // exempt it.
    let rule = exempt
        .is_none()
        .then(|| config.architecture_rule(pod, namespace))
        .flatten();
    let exempt = exempt.or_else(|| {
        (rule.is_none() && architecture_set(pod, preferences)).then_some(Exemption::ArchitectureSet)
    });
    let mut labels: Vec<(&str, &str)> = vec![
        (LABEL_NODE_AFFINITY, "not-set"),
        (LABEL_SCHEDULING_GATE, "not-set"),
    ];
    if preferences {
        labels.push((LABEL_PREFERRED_NODE_AFFINITY, "not-set"));
    }
    let already_gated = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE));
    let gated = exempt.is_none();
    if gated {
        labels.retain(|(k, _)| *k != LABEL_SCHEDULING_GATE);
        labels.push((LABEL_SCHEDULING_GATE, "gated"));
    }
    let mut patch = Vec::new();
    match &pod.metadata.labels {
        None => {
            let map: serde_json::Map<String, Value> = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect();
            patch.push(json!({"op": "add", "path": "/metadata/labels", "value": map}));
        }
        Some(existing) => {
            for (k, v) in labels {
                if existing.get(k).map(String::as_str) != Some(v) {
                    patch.push(json!({"op": "add", "path": format!("/metadata/labels/{}", pointer(k)), "value": v}));
                }
            }
        }
    }
    if gated && !already_gated {
        match pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()) {
            None => patch.push(json!({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": SCHEDULING_GATE}]})),
            Some(_) => patch.push(json!({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": SCHEDULING_GATE}})),
        }
    }
    Decision {
        patch,
        exemption: exempt,
        gated: gated && !already_gated,
        unsupported: Vec::new(),
        architecture_rule: rule,
    }
}
