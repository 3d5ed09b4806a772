//! Reading a `PodInfo` from the Kubernetes object, once per pod version: effective
//! requests (init containers, sidecars, overhead), host ports, tolerations, affinity and
//! spread constraints with kube-scheduler's defaults.

use k8s_openapi::api::core::v1 as core;
use multiarch_crd::names::KUBE_SCHEDULER_NAME;
use multiarch_policy::pod_images::{container_images, pull_secret_names, service_account};
use thin_vec::ThinVec;

use super::{
    HostPort, NamespaceScope, PodAffinity, PodAffinityTerm, PodExtras, PodInfo, SpreadConstraint,
    Toleration, volumes,
};
use crate::model::{
    declared_features::FeatureSet,
    quantity::InvalidQuantity,
    resources::{NonZero, Resources},
};
use multiarch_policy::selectors::{
    LabelSelector, Labels, NodeSelector, NodeSelectorTerm, Requirement,
};
use multiarch_policy::{device_class_resources::DeviceClassResources, routing};

impl PodInfo {
    /// Reads the API object. Fails only on a resource quantity the API server would have
    /// rejected, which an admitted pod cannot have.
    pub fn from_pod(pod: &core::Pod) -> Result<Self, InvalidQuantity> {
        let meta = &pod.metadata;
        let empty = core::PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&empty);
        let namespace = meta.namespace.clone().unwrap_or_default();
        let labels: Labels = meta.labels.clone().unwrap_or_default();
        let (requests, non_zero) = effective_requests(spec)?;

        let controller_uid = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| o.uid.clone());

        let (required_node_affinity, preferred_node_affinity) = node_affinity(spec);
        let (affinity, anti_affinity) = pod_affinities(spec, &namespace, &labels);

        let images = container_images(spec);

        let name = meta.name.clone().unwrap_or_default();
        let volumes = volumes::pod_volumes(&name, spec);
        let status = pod.status.as_ref();

        Ok(PodInfo {
            uid: meta.uid.clone().unwrap_or_default(),
            namespace: namespace.as_str().into(),
            name,
            priority: spec.priority.unwrap_or(0),
            scheduler_name: spec
                .scheduler_name
                .as_deref()
                .unwrap_or(KUBE_SCHEDULER_NAME)
                .into(),
            node_name: spec.node_name.clone().filter(|n| !n.is_empty()),
            controller_uid,
            requests,
            non_zero,
            host_ports: host_ports(spec),
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required_node_affinity,
            preferred_node_affinity,
            tolerations: spec.tolerations.iter().flatten().map(toleration).collect(),
            spread_constraints: spec
                .topology_spread_constraints
                .iter()
                .flatten()
                .map(|c| spread_constraint(c, &labels))
                .collect(),
            affinity,
            anti_affinity,
            images: images.into(),
            extras: PodExtras {
                // Unassigned pods only (see `PodExtras::annotations`).
                annotations: if spec.node_name.is_none() {
                    meta.annotations.clone().unwrap_or_default()
                } else {
                    Labels::new()
                },
                image_volumes: spec
                    .volumes
                    .iter()
                    .flatten()
                    .filter_map(|v| v.image.as_ref()?.reference.clone())
                    .collect(),
                scheduling_gates: spec
                    .scheduling_gates
                    .iter()
                    .flatten()
                    .map(|g| g.name.clone())
                    .collect(),
                nominated_node: status
                    .and_then(|s| s.nominated_node_name.clone())
                    .filter(|n| !n.is_empty()),
                // What the spec alone says; the names the DeviceClasses map are checked
                // when the pod is scheduled (`UnsupportedFeatures`): they change.
                unsupported: routing::unsupported(spec, &DeviceClassResources::default()).into(),
                image_pull_secrets: pull_secret_names(spec).into(),
            }
            .boxed(),
            deleting: meta.deletion_timestamp.is_some(),
            volumes,
            preemption_never: spec.preemption_policy.as_deref() == Some("Never"),
            needed_features: FeatureSet::needed_by(spec),
            start_time: status
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.as_second()),
            service_account: service_account(spec),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            labels: std::sync::Arc::new(labels),
        })
    }
}

fn container_requests(c: &core::Container) -> Result<(Resources, NonZero), InvalidQuantity> {
    let map = c.resources.as_ref().and_then(|r| r.requests.as_ref());
    let requests = map
        .map(Resources::from_map)
        .transpose()?
        .unwrap_or_default();
    let has = |name: &str| map.is_some_and(|m| m.contains_key(name));
    let non_zero = NonZero::of_container(&requests, has("cpu"), has("memory"));
    Ok((requests, non_zero))
}

/// kube-scheduler's pod request (`resourcehelper.PodRequests`): the sum of the regular
/// containers and sidecars (restartable init containers), or, if larger, what each plain
/// init container needs while the sidecars started before it run; plus the overhead.
/// Pod-level `resources.requests` replace the container sums for the resources they name.
fn effective_requests(spec: &core::PodSpec) -> Result<(Resources, NonZero), InvalidQuantity> {
    let mut sum = Resources::default();
    let mut sum_non_zero = NonZero::default();
    for c in &spec.containers {
        let (r, n) = container_requests(c)?;
        sum.add(&r);
        sum_non_zero.add(n);
    }
    let mut init_max = Resources::default();
    let mut init_max_non_zero = NonZero::default();
    let mut sidecars = Resources::default();
    let mut sidecars_non_zero = NonZero::default();
    for c in spec.init_containers.iter().flatten() {
        let (r, n) = container_requests(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            sidecars_non_zero.add(n);
            // While it starts, the sidecars before it are already running.
            init_max.max_with(&sidecars);
            init_max_non_zero.max_with(sidecars_non_zero);
        } else {
            let mut during = r.clone();
            during.add(&sidecars);
            init_max.max_with(&during);
            let mut during_nz = n;
            during_nz.add(sidecars_non_zero);
            init_max_non_zero.max_with(during_nz);
        }
    }
    sum.add(&sidecars);
    sum_non_zero.add(sidecars_non_zero);
    sum.max_with(&init_max);
    sum_non_zero.max_with(init_max_non_zero);

    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let level = Resources::from_map(pod_level)?;
        if pod_level.contains_key("cpu") {
            sum.milli_cpu = level.milli_cpu;
            sum_non_zero.milli_cpu = level.milli_cpu;
        }
        if pod_level.contains_key("memory") {
            sum.memory = level.memory;
            sum_non_zero.memory = level.memory;
        }
    }
    if let Some(overhead) = &spec.overhead {
        let overhead = Resources::from_map(overhead)?;
        sum.add(&overhead);
        sum_non_zero.add(NonZero {
            milli_cpu: overhead.milli_cpu,
            memory: overhead.memory,
        });
    }
    Ok((sum, sum_non_zero))
}

fn host_ports(spec: &core::PodSpec) -> ThinVec<HostPort> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| HostPort {
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            ip: p
                .host_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| "0.0.0.0".into()),
            port: p.host_port.unwrap_or_default(),
        })
        .collect()
}

fn toleration(t: &core::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone().unwrap_or_default(),
        exists: t.operator.as_deref() == Some("Exists"),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone().unwrap_or_default(),
    }
}

/// `matchLabelKeys`: the pod's own values for these keys are ANDed into the selector.
fn with_match_label_keys(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    keys: Option<&Vec<String>>,
    labels: &Labels,
) -> Option<LabelSelector> {
    let mut selector = LabelSelector::from(selector?);
    for key in keys.into_iter().flatten() {
        if let Some(value) = labels.get(key) {
            selector
                .requirements
                .push(Requirement::In(key.clone(), vec![value.clone()]));
        }
    }
    Some(selector)
}

fn spread_constraint(c: &core::TopologySpreadConstraint, labels: &Labels) -> SpreadConstraint {
    SpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        hard: c.when_unsatisfiable == "DoNotSchedule",
        // A constraint without a selector selects no pod.
        selector: with_match_label_keys(
            c.label_selector.as_ref(),
            c.match_label_keys.as_ref(),
            labels,
        )
        .unwrap_or(LabelSelector {
            requirements: vec![Requirement::Invalid],
        }),
        min_domains: c.min_domains,
        honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        same_controller: false,
    }
}

fn affinity_term(t: &core::PodAffinityTerm, namespace: &str, labels: &Labels) -> PodAffinityTerm {
    let mut selector = with_match_label_keys(
        t.label_selector.as_ref(),
        t.match_label_keys.as_ref(),
        labels,
    )
    .unwrap_or(LabelSelector {
        // A term without a selector matches no pod.
        requirements: vec![Requirement::Invalid],
    });
    for key in t.mismatch_label_keys.iter().flatten() {
        if let Some(value) = labels.get(key) {
            selector
                .requirements
                .push(Requirement::NotIn(key.clone(), vec![value.clone()]));
        }
    }
    let mut names: Vec<String> = t.namespaces.clone().unwrap_or_default();
    let ns_selector = t.namespace_selector.as_ref().map(LabelSelector::from);
    if names.is_empty() && ns_selector.is_none() {
        names.push(namespace.to_owned());
    }
    PodAffinityTerm {
        selector,
        namespaces: NamespaceScope::Listed(names, ns_selector),
        topology_key: t.topology_key.clone(),
    }
}

/// The pod's required node affinity and its preferred terms with their weights.
fn node_affinity(spec: &core::PodSpec) -> (Option<NodeSelector>, ThinVec<(i32, NodeSelectorTerm)>) {
    let node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let required_node_affinity = node_affinity
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(NodeSelector::from);
    let preferred_node_affinity = node_affinity
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .map(|p| (p.weight, NodeSelectorTerm::from(&p.preference)))
        .collect();
    (required_node_affinity, preferred_node_affinity)
}

/// The pod's affinity and anti-affinity to other pods.
fn pod_affinities(
    spec: &core::PodSpec,
    namespace: &str,
    labels: &Labels,
) -> (PodAffinity, PodAffinity) {
    let affinity = spec.affinity.as_ref();
    // The two API types have the same two fields, read alike.
    let read = |required, preferred| pod_affinity(required, preferred, namespace, labels);
    let attract = affinity.and_then(|a| a.pod_affinity.as_ref()).map(|a| {
        read(
            a.required_during_scheduling_ignored_during_execution
                .as_deref(),
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref(),
        )
    });
    let repel = affinity
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .map(|a| {
            read(
                a.required_during_scheduling_ignored_during_execution
                    .as_deref(),
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref(),
            )
        });
    (attract.unwrap_or_default(), repel.unwrap_or_default())
}

fn pod_affinity(
    required: Option<&[core::PodAffinityTerm]>,
    preferred: Option<&[core::WeightedPodAffinityTerm]>,
    namespace: &str,
    labels: &Labels,
) -> PodAffinity {
    PodAffinity {
        required: required
            .into_iter()
            .flatten()
            .map(|t| affinity_term(t, namespace, labels))
            .collect(),
        preferred: preferred
            .into_iter()
            .flatten()
            .map(|w| {
                (
                    w.weight,
                    affinity_term(&w.pod_affinity_term, namespace, labels),
                )
            })
            .collect(),
    }
}
