//! A compact builder of pods for tests, simulate and benches.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;

use super::PodInfo;

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

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
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

    /// An `image` volume of `reference`.
    pub fn image_volume(mut self, volume: &str, reference: &str) -> Self {
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(core::Volume {
                name: volume.into(),
                image: Some(core::ImageVolumeSource {
                    reference: Some(reference.into()),
                    pull_policy: None,
                }),
                ..Default::default()
            });
        self
    }

    /// A generic ephemeral volume (its claim is `<pod>-<volume>`).
    pub fn ephemeral(mut self, volume: &str) -> Self {
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(core::Volume {
                name: volume.into(),
                ephemeral: Some(core::EphemeralVolumeSource::default()),
                ..Default::default()
            });
        self
    }

    /// An inline GCE persistent disk.
    pub fn gce_disk(mut self, volume: &str, disk: &str, read_only: bool) -> Self {
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(core::Volume {
                name: volume.into(),
                gce_persistent_disk: Some(core::GCEPersistentDiskVolumeSource {
                    pd_name: disk.into(),
                    read_only: Some(read_only),
                    ..Default::default()
                }),
                ..Default::default()
            });
        self
    }

    /// An inline AWS EBS volume.
    pub fn ebs(mut self, volume: &str, volume_id: &str) -> Self {
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(core::Volume {
                name: volume.into(),
                aws_elastic_block_store: Some(core::AWSElasticBlockStoreVolumeSource {
                    volume_id: volume_id.into(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        self
    }

    pub fn preemption_never(mut self) -> Self {
        self.spec().preemption_policy = Some("Never".into());
        self
    }

    pub fn nominated(mut self, node: &str) -> Self {
        self.pod
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some(node.into());
        self
    }

    pub fn deleting(mut self) -> Self {
        self.pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        self
    }

    /// `status.startTime`, seconds since the epoch.
    pub fn started(mut self, seconds: i64) -> Self {
        let at = k8s_openapi::jiff::Timestamp::from_second(seconds)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        self.pod
            .status
            .get_or_insert_with(Default::default)
            .start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
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
