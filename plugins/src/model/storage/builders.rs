//! Compact builders of storage objects for tests, `simulate` and benches (the API objects
//! and what the scheduler reads from them).

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{core::v1 as core, storage::v1 as storage},
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1 as meta},
};

use super::{
    BIND_COMPLETED_ANNOTATION, ClaimInfo, PersistentVolumeInfo, SELECTED_NODE_ANNOTATION,
    StorageClassInfo,
};

const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

fn storage_map(size: &str) -> BTreeMap<String, Quantity> {
    [("storage".to_owned(), Quantity(size.into()))].into()
}

/// A PersistentVolume.
#[derive(Clone, Debug)]
pub struct VolumeBuilder {
    volume: core::PersistentVolume,
}

impl VolumeBuilder {
    /// An available ReadWriteOnce volume of `class`.
    pub fn new(name: &str, class: &str, size: &str) -> Self {
        let mut volume = core::PersistentVolume::default();
        volume.metadata.name = Some(name.into());
        volume.metadata.resource_version = Some("1".into());
        volume.spec = Some(core::PersistentVolumeSpec {
            storage_class_name: Some(class.into()),
            capacity: Some(storage_map(size)),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            ..Default::default()
        });
        volume.status = Some(core::PersistentVolumeStatus {
            phase: Some("Available".into()),
            ..Default::default()
        });
        VolumeBuilder { volume }
    }

    fn spec(&mut self) -> &mut core::PersistentVolumeSpec {
        self.volume.spec.get_or_insert_with(Default::default)
    }

    /// A local volume pinned to `node` by node affinity on the hostname label.
    pub fn local_on(mut self, node: &str) -> Self {
        let spec = self.spec();
        spec.local = Some(core::LocalVolumeSource {
            path: "/mnt/disk".into(),
            fs_type: None,
        });
        spec.node_affinity = Some(core::VolumeNodeAffinity {
            required: Some(core::NodeSelector {
                node_selector_terms: vec![core::NodeSelectorTerm {
                    match_expressions: Some(vec![core::NodeSelectorRequirement {
                        key: HOSTNAME_LABEL.into(),
                        operator: "In".into(),
                        values: Some(vec![node.into()]),
                    }]),
                    match_fields: None,
                }],
            }),
        });
        self
    }

    /// One more expression in every term of the node affinity: `key` in `values`.
    pub fn also_requiring(mut self, key: &str, values: &[&str]) -> Self {
        let terms = self
            .spec()
            .node_affinity
            .get_or_insert_with(Default::default)
            .required
            .get_or_insert_with(Default::default);
        for term in &mut terms.node_selector_terms {
            term.match_expressions.get_or_insert_with(Vec::new).push(
                core::NodeSelectorRequirement {
                    key: key.into(),
                    operator: "In".into(),
                    values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
                },
            );
        }
        self
    }

    /// Node affinity requiring `key` in `values`.
    pub fn affinity(mut self, key: &str, values: &[&str]) -> Self {
        self.spec().node_affinity = Some(core::VolumeNodeAffinity {
            required: Some(core::NodeSelector {
                node_selector_terms: vec![core::NodeSelectorTerm {
                    match_expressions: Some(vec![core::NodeSelectorRequirement {
                        key: key.into(),
                        operator: "In".into(),
                        values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
                    }]),
                    match_fields: None,
                }],
            }),
        });
        self
    }

    pub fn csi(mut self, driver: &str, handle: &str) -> Self {
        self.spec().csi = Some(core::CSIPersistentVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..Default::default()
        });
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.volume
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| (*m).to_owned()).collect());
        self
    }

    /// Bound (or pre-bound) to `namespace/name` with `uid` (may be empty).
    pub fn claim_ref(mut self, namespace: &str, name: &str, uid: &str) -> Self {
        self.spec().claim_ref = Some(core::ObjectReference {
            kind: Some("PersistentVolumeClaim".into()),
            api_version: Some("v1".into()),
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            uid: (!uid.is_empty()).then(|| uid.into()),
            ..Default::default()
        });
        self
    }

    pub fn phase(mut self, phase: &str) -> Self {
        self.volume.status = Some(core::PersistentVolumeStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        self
    }

    pub fn obj(self) -> core::PersistentVolume {
        self.volume
    }

    /// The [`PersistentVolumeInfo`]; builders only produce valid quantities.
    pub fn info(self) -> PersistentVolumeInfo {
        match PersistentVolumeInfo::from_api(&self.volume) {
            Ok(info) => info,
            Err(e) => panic!("VolumeBuilder produced an invalid volume: {e}"),
        }
    }
}

/// A PersistentVolumeClaim.
#[derive(Clone, Debug)]
pub struct ClaimBuilder {
    claim: core::PersistentVolumeClaim,
}

impl ClaimBuilder {
    /// A pending ReadWriteOnce claim of `size` in `class`.
    pub fn new(namespace: &str, name: &str, class: &str, size: &str) -> Self {
        let mut claim = core::PersistentVolumeClaim::default();
        claim.metadata.namespace = Some(namespace.into());
        claim.metadata.name = Some(name.into());
        claim.metadata.uid = Some(format!("uid-pvc-{namespace}-{name}"));
        claim.metadata.resource_version = Some("1".into());
        claim.spec = Some(core::PersistentVolumeClaimSpec {
            storage_class_name: (!class.is_empty()).then(|| class.into()),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(core::VolumeResourceRequirements {
                requests: Some(storage_map(size)),
                limits: None,
            }),
            ..Default::default()
        });
        claim.status = Some(core::PersistentVolumeClaimStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        });
        ClaimBuilder { claim }
    }

    fn annotate(&mut self, key: &str, value: &str) {
        self.claim
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
    }

    /// Bound to `volume` by the PersistentVolume controller.
    pub fn bound_to(mut self, volume: &str) -> Self {
        if let Some(spec) = self.claim.spec.as_mut() {
            spec.volume_name = Some(volume.into());
        }
        self.annotate(BIND_COMPLETED_ANNOTATION, "yes");
        self.claim.status = Some(core::PersistentVolumeClaimStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        self
    }

    pub fn selected_node(mut self, node: &str) -> Self {
        self.annotate(SELECTED_NODE_ANNOTATION, node);
        self
    }

    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        if let Some(spec) = self.claim.spec.as_mut() {
            spec.access_modes = Some(modes.iter().map(|m| (*m).to_owned()).collect());
        }
        self
    }

    /// Owned by the pod (a generic ephemeral volume's claim).
    pub fn owned_by_pod(mut self, pod: &str, uid: &str) -> Self {
        self.claim.metadata.owner_references = Some(vec![meta::OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        self
    }

    pub fn obj(self) -> core::PersistentVolumeClaim {
        self.claim
    }

    /// The [`ClaimInfo`]; builders only produce valid quantities.
    pub fn info(self) -> ClaimInfo {
        match ClaimInfo::from_api(&self.claim) {
            Ok(info) => info,
            Err(e) => panic!("ClaimBuilder produced an invalid claim: {e}"),
        }
    }
}

/// A StorageClass.
#[derive(Clone, Debug)]
pub struct ClassBuilder {
    class: storage::StorageClass,
}

impl ClassBuilder {
    /// `WaitForFirstConsumer` when `wait`, else `Immediate`.
    pub fn new(name: &str, provisioner: &str, wait: bool) -> Self {
        let mut class = storage::StorageClass {
            provisioner: provisioner.into(),
            volume_binding_mode: Some(
                if wait {
                    "WaitForFirstConsumer"
                } else {
                    "Immediate"
                }
                .into(),
            ),
            ..Default::default()
        };
        class.metadata.name = Some(name.into());
        ClassBuilder { class }
    }

    /// Provisioning is allowed only where `key` is one of `values`.
    pub fn allowed(mut self, key: &str, values: &[&str]) -> Self {
        self.class
            .allowed_topologies
            .get_or_insert_with(Vec::new)
            .push(core::TopologySelectorTerm {
                match_label_expressions: Some(vec![core::TopologySelectorLabelRequirement {
                    key: key.into(),
                    values: values.iter().map(|v| (*v).to_owned()).collect(),
                }]),
            });
        self
    }

    pub fn obj(self) -> storage::StorageClass {
        self.class
    }

    pub fn info(self) -> StorageClassInfo {
        StorageClassInfo::from_api(&self.class)
    }
}
