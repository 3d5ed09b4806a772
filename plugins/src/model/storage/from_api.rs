//! Reading storage objects from their API form, once per object version.

use std::sync::Arc;

use k8s_openapi::api::{core::v1 as core, storage::v1 as storage};

use super::{
    AccessModes, BETA_CLASS_ANNOTATION, BIND_COMPLETED_ANNOTATION, ClaimInfo, ClaimRef,
    CsiDriverInfo, CsiNodeInfo, CsiVolume, PersistentVolumeInfo, SELECTED_NODE_ANNOTATION,
    StorageCapacityInfo, StorageClassInfo, TopologyTerm, VolumeAttachmentInfo, migration,
};
use crate::model::quantity::{InvalidQuantity, parse_scaled};
use multiarch_policy::selectors::{LabelSelector, NodeSelector};

const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
const MIGRATED_PLUGINS_ANNOTATION: &str = "storage.alpha.kubernetes.io/migrated-plugins";

fn storage_bytes(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Result<Option<i64>, InvalidQuantity> {
    map.and_then(|m| m.get("storage"))
        .map(|q| parse_scaled(&q.0, 1))
        .transpose()
}

impl PersistentVolumeInfo {
    pub fn from_api(pv: &core::PersistentVolume) -> Result<Self, InvalidQuantity> {
        let meta = &pv.metadata;
        let spec = pv.spec.clone().unwrap_or_default();
        let annotations = meta.annotations.clone().unwrap_or_default();
        let node_affinity = spec
            .node_affinity
            .as_ref()
            .and_then(|a| a.required.as_ref());
        let pinned_hostnames: Option<Arc<[String]>> =
            node_affinity.and_then(pinned_hostnames).map(Arc::from);
        let local_node_names = spec
            .local
            .as_ref()
            .and(node_affinity)
            .and_then(local_node_names)
            .map(|names| match &pinned_hostnames {
                Some(pinned) if **pinned == *names => pinned.clone(),
                _ => Arc::from(names),
            });
        let hostname_only_affinity = node_affinity.is_some_and(hostname_only);
        let migrated = migration::of_persistent_volume(&spec);
        let csi = match &spec.csi {
            Some(csi) => Some(CsiVolume {
                driver: csi.driver.clone(),
                handle: csi.volume_handle.clone(),
            }),
            None => migrated.as_ref().map(|m| m.csi.clone()),
        };
        Ok(PersistentVolumeInfo {
            name: meta.name.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            storage_class: annotations
                .get(BETA_CLASS_ANNOTATION)
                .cloned()
                .or(spec.storage_class_name.clone())
                .unwrap_or_default(),
            capacity: storage_bytes(spec.capacity.as_ref())?.unwrap_or(0),
            access_modes: AccessModes::parse(spec.access_modes.iter().flatten()),
            block: spec.volume_mode.as_deref() == Some("Block"),
            attributes_class: spec
                .volume_attributes_class_name
                .clone()
                .unwrap_or_default(),
            claim_ref: spec.claim_ref.as_ref().map(|r| ClaimRef {
                namespace: r.namespace.clone().unwrap_or_default(),
                name: r.name.clone().unwrap_or_default(),
                uid: r.uid.clone().unwrap_or_default(),
            }),
            node_affinity: node_affinity
                .filter(|_| !hostname_only_affinity)
                .map(NodeSelector::from),
            available: pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"),
            deleting: meta.deletion_timestamp.is_some(),
            in_tree_plugin: if spec.csi.is_none() {
                migrated.map(|m| m.plugin)
            } else {
                None
            },
            csi,
            local_node_names,
            pinned_hostnames,
            hostname_only_affinity,
        })
    }
}

/// `GetLocalPersistentVolumeNodeNames`: per term, the intersection of its
/// `kubernetes.io/hostname In` values; the union over terms. `None` when no term names
/// nodes that way.
fn local_node_names(selector: &core::NodeSelector) -> Option<Vec<String>> {
    let mut union: Option<Vec<String>> = None;
    for term in &selector.node_selector_terms {
        let mut nodes: Option<Vec<String>> = None;
        for e in term.match_expressions.iter().flatten() {
            if e.key == HOSTNAME_LABEL && e.operator == "In" {
                let values = e.values.clone().unwrap_or_default();
                nodes = Some(match nodes {
                    None => values,
                    Some(have) => have.into_iter().filter(|n| values.contains(n)).collect(),
                });
            }
        }
        if let Some(nodes) = nodes {
            let all = union.get_or_insert_with(Vec::new);
            for n in nodes {
                if !all.contains(&n) {
                    all.push(n);
                }
            }
        }
    }
    union.map(|mut names| {
        names.sort();
        names
    })
}

/// The hostnames the selector is limited to, when every term requires
/// `kubernetes.io/hostname In [...]` (else `None`: any node may match).
fn pinned_hostnames(selector: &core::NodeSelector) -> Option<Vec<String>> {
    let mut all: Vec<String> = Vec::new();
    for term in &selector.node_selector_terms {
        let mut term_names: Option<Vec<String>> = None;
        for e in term.match_expressions.iter().flatten() {
            if e.key == HOSTNAME_LABEL && e.operator == "In" {
                let values = e.values.clone().unwrap_or_default();
                term_names = Some(match term_names {
                    None => values,
                    Some(have) => have.into_iter().filter(|n| values.contains(n)).collect(),
                });
            }
        }
        all.extend(term_names?);
    }
    all.sort();
    all.dedup();
    Some(all)
}

/// Every term is nothing but `kubernetes.io/hostname In [...]` expressions (so a node
/// matches exactly when its hostname is among `pinned_hostnames`).
fn hostname_only(selector: &core::NodeSelector) -> bool {
    !selector.node_selector_terms.is_empty()
        && selector.node_selector_terms.iter().all(|term| {
            term.match_fields.as_ref().is_none_or(Vec::is_empty)
                && term.match_expressions.as_ref().is_some_and(|expressions| {
                    !expressions.is_empty()
                        && expressions
                            .iter()
                            .all(|e| e.key == HOSTNAME_LABEL && e.operator == "In")
                })
        })
}

impl ClaimInfo {
    pub fn from_api(pvc: &core::PersistentVolumeClaim) -> Result<Self, InvalidQuantity> {
        let meta = &pvc.metadata;
        let spec = pvc.spec.clone().unwrap_or_default();
        let annotations = meta.annotations.clone().unwrap_or_default();
        Ok(ClaimInfo {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            storage_class: annotations
                .get(BETA_CLASS_ANNOTATION)
                .cloned()
                .or(spec.storage_class_name.clone())
                .unwrap_or_default(),
            volume_name: spec.volume_name.clone().unwrap_or_default(),
            access_modes: AccessModes::parse(spec.access_modes.iter().flatten()),
            block: spec.volume_mode.as_deref() == Some("Block"),
            attributes_class: spec
                .volume_attributes_class_name
                .clone()
                .unwrap_or_default(),
            request: storage_bytes(spec.resources.as_ref().and_then(|r| r.requests.as_ref()))?,
            selector: spec.selector.as_ref().map(LabelSelector::from),
            selected_node: annotations.get(SELECTED_NODE_ANNOTATION).cloned(),
            bind_completed: annotations.contains_key(BIND_COMPLETED_ANNOTATION),
            lost: pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost"),
            deleting: meta.deletion_timestamp.is_some(),
            owner_pod_uid: meta
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && o.kind == "Pod")
                .map(|o| o.uid.clone()),
        })
    }
}

impl StorageClassInfo {
    pub fn from_api(class: &storage::StorageClass) -> Self {
        StorageClassInfo {
            name: class.metadata.name.clone().unwrap_or_default(),
            provisioner: class.provisioner.clone(),
            wait_for_first_consumer: class
                .volume_binding_mode
                .as_deref()
                .map(|m| m == "WaitForFirstConsumer"),
            allowed_topologies: class
                .allowed_topologies
                .iter()
                .flatten()
                .map(|term| TopologyTerm {
                    expressions: term
                        .match_label_expressions
                        .iter()
                        .flatten()
                        .map(|e| (e.key.clone(), e.values.clone()))
                        .collect(),
                })
                .collect(),
        }
    }
}

impl CsiNodeInfo {
    pub fn from_api(node: &storage::CSINode) -> Self {
        CsiNodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            limits: node
                .spec
                .drivers
                .iter()
                .filter_map(|d| {
                    d.allocatable
                        .as_ref()
                        .and_then(|a| a.count)
                        .map(|count| (d.name.clone(), i64::from(count)))
                })
                .collect(),
            migrated_plugins: node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(MIGRATED_PLUGINS_ANNOTATION))
                .map(|list| {
                    list.split(',')
                        .map(str::trim)
                        .filter(|p| !p.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

impl CsiDriverInfo {
    pub fn from_api(driver: &storage::CSIDriver) -> Self {
        CsiDriverInfo {
            name: driver.metadata.name.clone().unwrap_or_default(),
            storage_capacity: driver.spec.storage_capacity == Some(true),
        }
    }
}

impl VolumeAttachmentInfo {
    pub fn from_api(attachment: &storage::VolumeAttachment) -> Self {
        VolumeAttachmentInfo {
            name: attachment.metadata.name.clone().unwrap_or_default(),
            node: attachment.spec.node_name.clone(),
            attacher: attachment.spec.attacher.clone(),
            volume: attachment.spec.source.persistent_volume_name.clone(),
        }
    }
}

impl StorageCapacityInfo {
    pub fn from_api(capacity: &storage::CSIStorageCapacity) -> Result<Self, InvalidQuantity> {
        let meta = &capacity.metadata;
        Ok(StorageCapacityInfo {
            key: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            ),
            storage_class: capacity.storage_class_name.clone(),
            node_topology: capacity.node_topology.as_ref().map(LabelSelector::from),
            capacity: capacity
                .capacity
                .as_ref()
                .map(|q| parse_scaled(&q.0, 1))
                .transpose()?,
            maximum_volume_size: capacity
                .maximum_volume_size
                .as_ref()
                .map(|q| parse_scaled(&q.0, 1))
                .transpose()?,
        })
    }
}
