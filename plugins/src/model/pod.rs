//! What the scheduler needs to know about a pod, read once from the API object.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use super::{
    quantity::InvalidQuantity,
    resources::{NonZero, Resources},
    selectors::{LabelSelector, Labels, NodeSelector, NodeSelectorTerm},
};

pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// A pod as the scheduler sees it. Built once per pod version, shared behind `Arc`.
#[derive(Clone, Debug, Default)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub priority: i32,
    pub scheduler_name: String,
    pub node_name: Option<String>,
    /// UID of the controller owner (ReplicaSet, StatefulSet...), the group the default
    /// spread constraints apply to.
    pub controller_uid: Option<String>,
    pub requests: Resources,
    pub non_zero: NonZero,
    pub host_ports: Vec<HostPort>,
    pub node_selector: Labels,
    pub required_node_affinity: Option<NodeSelector>,
    pub preferred_node_affinity: Vec<(i32, NodeSelectorTerm)>,
    pub tolerations: Vec<Toleration>,
    pub spread_constraints: Vec<SpreadConstraint>,
    pub affinity: PodAffinity,
    pub anti_affinity: PodAffinity,
    /// Containers and init containers, in spec order (ephemeral containers are added after
    /// scheduling and never decide placement).
    pub images: Vec<ContainerImage>,
    pub scheduling_gates: Vec<String>,
    pub deleting: bool,
    /// Volumes the scheduler cannot place correctly yet (PersistentVolumeClaims and
    /// generic ephemeral volumes need volume binding).
    pub unsupported_volumes: Vec<String>,
    /// `imagePullSecrets` names and the service account: where the image inspector finds
    /// the pod's pull credentials.
    pub image_pull_secrets: Vec<String>,
    pub service_account: Option<String>,
    pub resource_version: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerImage {
    pub container: String,
    pub image: String,
    /// `imagePullPolicy: Always`: the tag may have moved, so a cached answer is not enough.
    pub pull_always: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

impl HostPort {
    /// Two host ports clash when protocol and port are equal and either address is the
    /// wildcard or both are the same.
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.ip == "0.0.0.0" || other.ip == "0.0.0.0")
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toleration {
    pub key: String,
    pub exists: bool,
    pub value: String,
    /// Empty: every effect.
    pub effect: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpreadConstraint {
    pub max_skew: i32,
    pub topology_key: String,
    pub hard: bool,
    pub selector: LabelSelector,
    pub min_domains: Option<i32>,
    /// `nodeAffinityPolicy: Honor` (default): only nodes matching the pod's node
    /// affinity/selector count as domains.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose taints the pod tolerates count.
    pub honor_node_taints: bool,
    /// System default constraint: counts pods of the same controller instead of a selector.
    pub same_controller: bool,
}

/// Required and preferred terms of pod affinity or of pod anti-affinity.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAffinity {
    pub required: Vec<PodAffinityTerm>,
    pub preferred: Vec<(i32, PodAffinityTerm)>,
}

impl PodAffinity {
    pub fn is_empty(&self) -> bool {
        self.required.is_empty() && self.preferred.is_empty()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodAffinityTerm {
    pub selector: LabelSelector,
    pub namespaces: NamespaceScope,
    pub topology_key: String,
}

/// Which namespaces a pod-affinity term looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceScope {
    /// Listed names, plus the namespaces a selector matches (`None` when no selector).
    Listed(Vec<String>, Option<LabelSelector>),
}

impl PodAffinityTerm {
    /// Whether `pod` (in a namespace labelled `namespace_labels`) is selected by the term.
    pub fn selects(&self, pod: &PodInfo, namespace_labels: Option<&Labels>) -> bool {
        let NamespaceScope::Listed(names, selector) = &self.namespaces;
        let in_scope = names.contains(&pod.namespace)
            || selector.as_ref().is_some_and(|s| {
                s.is_empty() || namespace_labels.is_some_and(|labels| s.matches(labels))
            });
        in_scope && self.selector.matches(&pod.labels)
    }
}

impl PodInfo {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn has_pod_affinity(&self) -> bool {
        !self.affinity.is_empty() || !self.anti_affinity.is_empty()
    }

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

        let affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_affinity.as_ref())
            .map(|a| {
                pod_affinity(
                    a.required_during_scheduling_ignored_during_execution
                        .as_deref(),
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_deref(),
                    &namespace,
                    &labels,
                )
            })
            .unwrap_or_default();
        let anti_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .map(|a| {
                pod_affinity(
                    a.required_during_scheduling_ignored_during_execution
                        .as_deref(),
                    a.preferred_during_scheduling_ignored_during_execution
                        .as_deref(),
                    &namespace,
                    &labels,
                )
            })
            .unwrap_or_default();

        let images = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .filter_map(|c| {
                c.image.as_ref().map(|image| ContainerImage {
                    container: c.name.clone(),
                    image: image.clone(),
                    pull_always: c.image_pull_policy.as_deref() == Some("Always")
                        || (c.image_pull_policy.is_none() && image_defaults_to_always(image)),
                })
            })
            .collect();

        let unsupported_volumes = spec
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
            .map(|v| v.name.clone())
            .collect();

        Ok(PodInfo {
            uid: meta.uid.clone().unwrap_or_default(),
            namespace: namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
            priority: spec.priority.unwrap_or(0),
            scheduler_name: spec
                .scheduler_name
                .clone()
                .unwrap_or_else(|| DEFAULT_SCHEDULER.to_owned()),
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
            images,
            scheduling_gates: spec
                .scheduling_gates
                .iter()
                .flatten()
                .map(|g| g.name.clone())
                .collect(),
            deleting: meta.deletion_timestamp.is_some(),
            unsupported_volumes,
            image_pull_secrets: spec
                .image_pull_secrets
                .iter()
                .flatten()
                .map(|r| r.name.clone())
                .filter(|n| !n.is_empty())
                .collect(),
            service_account: spec.service_account_name.clone().filter(|s| !s.is_empty()),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            labels,
        })
    }
}

/// The API server defaults `imagePullPolicy` to Always for `:latest` and untagged images.
fn image_defaults_to_always(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        None => true,
        Some((_, tag)) => tag == "latest",
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

fn host_ports(spec: &core::PodSpec) -> Vec<HostPort> {
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
                .push(super::selectors::Requirement::In(
                    key.clone(),
                    vec![value.clone()],
                ));
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
            requirements: vec![super::selectors::Requirement::Invalid],
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
        requirements: vec![super::selectors::Requirement::Invalid],
    });
    for key in t.mismatch_label_keys.iter().flatten() {
        if let Some(value) = labels.get(key) {
            selector
                .requirements
                .push(super::selectors::Requirement::NotIn(
                    key.clone(),
                    vec![value.clone()],
                ));
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

/// A compact builder for tests, simulate and benches (`st.MakePod()` in kube-scheduler).
#[derive(Clone, Debug, Default)]
pub struct PodBuilder {
    pod: core::Pod,
}

impl PodBuilder {
    pub fn new(namespace: &str, name: &str) -> Self {
        let mut pod = core::Pod::default();
        pod.metadata.namespace = Some(namespace.into());
        pod.metadata.name = Some(name.into());
        pod.metadata.uid = Some(format!("uid-{namespace}-{name}"));
        pod.spec = Some(core::PodSpec::default());
        PodBuilder { pod }
    }

    fn spec(&mut self) -> &mut core::PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.into());
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.spec().priority = Some(priority);
        self
    }

    pub fn scheduler(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.into());
        self
    }

    pub fn node(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    pub fn owner(mut self, kind: &str, uid: &str) -> Self {
        self.pod
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: kind.into(),
                    name: uid.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                },
            );
        self
    }

    /// A container with cpu/memory requests (`""` for none).
    pub fn container(mut self, name: &str, image: &str, cpu: &str, memory: &str) -> Self {
        let container = make_container(name, image, cpu, memory);
        self.spec().containers.push(container);
        self
    }

    pub fn init_container(mut self, name: &str, image: &str, cpu: &str, memory: &str) -> Self {
        let container = make_container(name, image, cpu, memory);
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(container);
        self
    }

    pub fn sidecar(mut self, name: &str, image: &str, cpu: &str, memory: &str) -> Self {
        let mut container = make_container(name, image, cpu, memory);
        container.restart_policy = Some("Always".into());
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(container);
        self
    }

    pub fn extended(mut self, resource: &str, amount: &str) -> Self {
        if let Some(c) = self.spec().containers.last_mut() {
            c.resources
                .get_or_insert_with(Default::default)
                .requests
                .get_or_insert_with(BTreeMap::new)
                .insert(
                    resource.into(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(amount.into()),
                );
        }
        self
    }

    pub fn host_port(mut self, port: i32, protocol: &str, ip: &str) -> Self {
        if let Some(c) = self.spec().containers.last_mut() {
            c.ports
                .get_or_insert_with(Vec::new)
                .push(core::ContainerPort {
                    container_port: port,
                    host_port: Some(port),
                    protocol: Some(protocol.into()),
                    host_ip: (!ip.is_empty()).then(|| ip.into()),
                    name: None,
                });
        }
        self
    }

    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(core::Toleration {
                key: (!key.is_empty()).then(|| key.into()),
                operator: Some(operator.into()),
                value: (!value.is_empty()).then(|| value.into()),
                effect: (!effect.is_empty()).then(|| effect.into()),
                toleration_seconds: None,
            });
        self
    }

    pub fn affinity(mut self, affinity: core::Affinity) -> Self {
        self.spec().affinity = Some(affinity);
        self
    }

    pub fn spread(mut self, constraint: core::TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(constraint);
        self
    }

    pub fn gate(mut self, name: &str) -> Self {
        self.spec()
            .scheduling_gates
            .get_or_insert_with(Vec::new)
            .push(core::PodSchedulingGate { name: name.into() });
        self
    }

    pub fn overhead(mut self, cpu: &str, memory: &str) -> Self {
        self.spec().overhead = Some(quantities(cpu, memory));
        self
    }

    pub fn pvc(mut self, volume: &str, claim: &str) -> Self {
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(core::Volume {
                name: volume.into(),
                persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                    claim_name: claim.into(),
                    read_only: None,
                }),
                ..Default::default()
            });
        self
    }

    pub fn obj(self) -> core::Pod {
        self.pod
    }

    /// The [`PodInfo`]; builders only produce valid quantities.
    pub fn info(self) -> PodInfo {
        match PodInfo::from_pod(&self.pod) {
            Ok(info) => info,
            Err(e) => panic!("PodBuilder produced an invalid pod: {e}"),
        }
    }
}

fn quantities(
    cpu: &str,
    memory: &str,
) -> BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    let mut map = BTreeMap::new();
    if !cpu.is_empty() {
        map.insert(
            "cpu".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.into()),
        );
    }
    if !memory.is_empty() {
        map.insert(
            "memory".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(memory.into()),
        );
    }
    map
}

fn make_container(name: &str, image: &str, cpu: &str, memory: &str) -> core::Container {
    let requests = quantities(cpu, memory);
    core::Container {
        name: name.into(),
        image: Some(image.into()),
        resources: (!requests.is_empty()).then(|| core::ResourceRequirements {
            requests: Some(requests),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MI: i64 = 1024 * 1024;

    /// kube's `PodRequests` cases: init containers take the max, sidecars add up.
    #[test]
    fn effective_requests_follow_the_init_and_sidecar_rules() {
        let cases: Vec<(&str, PodBuilder, i64, i64)> = vec![
            (
                "containers add up",
                PodBuilder::new("ns", "p")
                    .container("a", "i", "100m", "100Mi")
                    .container("b", "i", "200m", "50Mi"),
                300,
                150 * MI,
            ),
            (
                "a larger init container wins",
                PodBuilder::new("ns", "p")
                    .init_container("init", "i", "2", "10Mi")
                    .container("a", "i", "100m", "100Mi"),
                2000,
                100 * MI,
            ),
            (
                "sidecars add to containers",
                PodBuilder::new("ns", "p")
                    .sidecar("proxy", "i", "50m", "20Mi")
                    .container("a", "i", "100m", "100Mi"),
                150,
                120 * MI,
            ),
            (
                "init after a sidecar runs beside it",
                PodBuilder::new("ns", "p")
                    .sidecar("proxy", "i", "500m", "20Mi")
                    .init_container("migrate", "i", "1", "10Mi")
                    .container("a", "i", "100m", "100Mi"),
                1500,
                120 * MI,
            ),
            (
                "init before a sidecar does not",
                PodBuilder::new("ns", "p")
                    .init_container("migrate", "i", "1", "10Mi")
                    .sidecar("proxy", "i", "500m", "20Mi")
                    .container("a", "i", "100m", "100Mi"),
                1000,
                120 * MI,
            ),
            (
                "overhead is added",
                PodBuilder::new("ns", "p")
                    .container("a", "i", "100m", "100Mi")
                    .overhead("250m", "120Mi"),
                350,
                220 * MI,
            ),
        ];
        for (name, builder, cpu, memory) in cases {
            let info = builder.info();
            assert_eq!(info.requests.milli_cpu, cpu, "{name}");
            assert_eq!(info.requests.memory, memory, "{name}");
        }
    }

    #[test]
    fn best_effort_containers_count_default_requests_for_scoring() {
        let info = PodBuilder::new("ns", "p")
            .container("a", "i", "", "")
            .info();
        assert!(info.requests.is_zero());
        assert_eq!(info.non_zero.milli_cpu, 100);
        assert_eq!(info.non_zero.memory, 200 * MI);
    }

    #[test]
    fn images_include_init_containers_and_pull_policy() {
        let info = PodBuilder::new("ns", "p")
            .init_container("init", "busybox:1.36", "", "")
            .container("app", "quay.io/org/app", "", "")
            .container("pinned", "quay.io/org/app@sha256:abc", "", "")
            .info();
        let images: Vec<(&str, bool)> = info
            .images
            .iter()
            .map(|i| (i.image.as_str(), i.pull_always))
            .collect();
        assert_eq!(
            images,
            [
                ("busybox:1.36", false),
                ("quay.io/org/app", true),
                ("quay.io/org/app@sha256:abc", false)
            ]
        );
    }

    #[test]
    fn host_ports_default_to_tcp_on_every_address() {
        let info = PodBuilder::new("ns", "p")
            .container("a", "i", "", "")
            .host_port(8080, "TCP", "")
            .info();
        let port = &info.host_ports[0];
        assert_eq!(
            (port.protocol.as_str(), port.ip.as_str(), port.port),
            ("TCP", "0.0.0.0", 8080)
        );
        let specific = HostPort {
            protocol: "TCP".into(),
            ip: "10.0.0.1".into(),
            port: 8080,
        };
        let other_ip = HostPort {
            protocol: "TCP".into(),
            ip: "10.0.0.2".into(),
            port: 8080,
        };
        let udp = HostPort {
            protocol: "UDP".into(),
            ip: "0.0.0.0".into(),
            port: 8080,
        };
        assert!(port.conflicts_with(&specific));
        assert!(!specific.conflicts_with(&other_ip));
        assert!(!port.conflicts_with(&udp));
    }

    #[test]
    fn invalid_quantities_are_an_error() {
        let pod = PodBuilder::new("ns", "p")
            .container("a", "i", "lots", "")
            .obj();
        assert!(PodInfo::from_pod(&pod).is_err());
    }
}
