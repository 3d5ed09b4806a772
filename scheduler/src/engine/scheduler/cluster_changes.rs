//! What the scheduler learns besides nodes and pods: namespaces (namespace selectors),
//! PodDisruptionBudgets (preemption) and storage objects (the volume plugins), each
//! change handed to the queue's hints.

use std::time::Instant;

use multiarch_plugins::{
    events::{ClusterChange, StorageChange},
    model::disruption_budget::DisruptionBudget,
};
use multiarch_policy::{device_class_resources::DeviceClassResources, selectors::Labels};

use super::{SchedulerCore, StorageKey, StorageObject};

impl SchedulerCore {
    /// A namespace and its labels (for namespace selectors).
    pub fn apply_namespace(&mut self, name: &str, labels: Labels, now: Instant) {
        if self.cluster.set_namespace_labels(name, labels) {
            self.event(&ClusterChange::NamespaceChanged(name), now);
        }
    }

    /// The extended resource names the DeviceClasses map (`UnsupportedFeatures`).
    pub fn apply_device_classes(&mut self, resources: DeviceClassResources, now: Instant) {
        if self.cluster.set_device_class_resources(resources) {
            self.event(&ClusterChange::DeviceClassesChanged, now);
        }
    }

    pub fn delete_namespace(&mut self, name: &str) {
        self.cluster.remove_namespace(name);
    }

    pub fn apply_disruption_budget(&mut self, budget: DisruptionBudget) {
        self.cluster.upsert_disruption_budget(budget);
    }

    pub fn delete_disruption_budget(&mut self, key: &str) {
        self.cluster.delete_disruption_budget(key);
    }

    /// A storage object was added or changed.
    pub fn apply_storage(&mut self, object: StorageObject, now: Instant) {
        let storage = self.cluster.storage_mut();
        match object {
            StorageObject::Volume(v) => {
                let name = v.name.clone();
                storage.upsert_volume(v);
                if let Some(v) = self.cluster.storage().volume(&name) {
                    let change = ClusterChange::Storage(StorageChange::PersistentVolume(v));
                    self.queue
                        .on_event(&change, now, &self.profile, &self.cluster);
                }
            }
            StorageObject::Claim(c) => {
                let (namespace, name) = (c.namespace.clone(), c.name.clone());
                storage.upsert_claim(c);
                if let Some(c) = self.cluster.storage().claim(&namespace, &name) {
                    let change = ClusterChange::Storage(StorageChange::Claim(c));
                    self.queue
                        .on_event(&change, now, &self.profile, &self.cluster);
                }
            }
            StorageObject::Class(c) => {
                let name = c.name.clone();
                storage.upsert_class(c);
                if let Some(c) = self.cluster.storage().class(&name) {
                    let change = ClusterChange::Storage(StorageChange::StorageClass(c));
                    self.queue
                        .on_event(&change, now, &self.profile, &self.cluster);
                }
            }
            StorageObject::CsiNode(n) => {
                let name = n.name.clone();
                storage.upsert_csi_node(n);
                self.event(&ClusterChange::Storage(StorageChange::CsiNode(&name)), now);
            }
            StorageObject::CsiDriver(d) => {
                let name = d.name.clone();
                storage.upsert_csi_driver(d);
                self.event(
                    &ClusterChange::Storage(StorageChange::CsiDriver(&name)),
                    now,
                );
            }
            StorageObject::Capacity(c) => {
                let change_copy = c.clone();
                storage.upsert_capacity(c);
                self.event(
                    &ClusterChange::Storage(StorageChange::Capacity(&change_copy)),
                    now,
                );
            }
            StorageObject::Attachment(a) => storage.upsert_attachment(a),
        }
    }

    /// A storage object was deleted (only a detached volume can help a pod).
    pub fn delete_storage(&mut self, key: StorageKey, now: Instant) {
        let storage = self.cluster.storage_mut();
        match key {
            StorageKey::Volume(name) => storage.delete_volume(&name),
            StorageKey::Claim(namespace, name) => storage.delete_claim(&namespace, &name),
            StorageKey::Class(name) => storage.delete_class(&name),
            StorageKey::CsiNode(name) => storage.delete_csi_node(&name),
            StorageKey::CsiDriver(name) => storage.delete_csi_driver(&name),
            StorageKey::Capacity(key) => storage.delete_capacity(&key),
            StorageKey::Attachment(name) => {
                storage.delete_attachment(&name);
                self.event(
                    &ClusterChange::Storage(StorageChange::AttachmentDeleted(&name)),
                    now,
                );
            }
        }
    }
}
