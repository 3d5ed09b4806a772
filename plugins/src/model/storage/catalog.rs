//! Every storage object the volume plugins read, plus the bindings the scheduler decided
//! but has not written yet: a claim it chose a volume for (or a node to provision on) is
//! seen as such by the next cycles, so two pods never get the same volume.

use std::{
    collections::{BTreeSet, VecDeque},
    sync::Arc,
};

use rustc_hash::FxHashMap;

use super::{
    ClaimInfo, ClaimRef, CsiDriverInfo, CsiNodeInfo, PersistentVolumeInfo, StorageCapacityInfo,
    StorageClassInfo, VolumeAttachmentInfo, claim_key,
};
use crate::model::{
    hostname::{Hostname, HostnameNames},
    pod::PodInfo,
};

/// A volume chosen for a claim of the pod (kube-scheduler's static binding).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticBinding {
    pub volume: String,
    /// The version the decision was made on: the write is refused if it changed.
    pub volume_resource_version: String,
    pub claim: ClaimRef,
    pub claim_resource_version: String,
    /// The volume was not bound to the claim before (the scheduler, not a user, binds it).
    pub bound_by_scheduler: bool,
}

/// A claim to provision on the chosen node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provision {
    pub claim: ClaimRef,
    pub claim_resource_version: String,
}

/// What the binder writes before binding the pod (kube-scheduler's `PodVolumes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeBindingPlan {
    pub bindings: Vec<StaticBinding>,
    pub provisions: Vec<Provision>,
}

impl VolumeBindingPlan {
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty() && self.provisions.is_empty()
    }
}

/// Changes of [`StorageCatalog::pinned_changes_since`] kept.
const MAX_PINNED_LOG: usize = 4096;

#[derive(Clone, Debug, Default)]
pub struct StorageCatalog {
    volumes: FxHashMap<String, Arc<PersistentVolumeInfo>>,
    /// Volume names per class, sorted so matching is deterministic.
    by_class: FxHashMap<String, BTreeSet<String>>,
    /// Volumes without a claim reference, per class: those pinned to hostnames (local
    /// volumes) by hostname, so a cycle looks at one node's few instead of the cluster's
    /// thousands, and the others apart. With the volumes that name a claim
    /// (`namespace/name`), the only ones an unbound claim may use.
    /// The pinned ones are kept themselves (in name order), not their names: a cycle
    /// reads them for every candidate node. Hosts are keyed by [`Hostname`], shared with
    /// the nodes (see [`intern_hostname`](Self::intern_hostname)).
    unclaimed_pinned: FxHashMap<String, FxHashMap<Hostname, Vec<Arc<PersistentVolumeInfo>>>>,
    hostnames: HostnameNames,
    unclaimed_unpinned: FxHashMap<String, BTreeSet<String>>,
    /// The (class, hostname) pairs whose unclaimed pinned volumes changed (one came, went
    /// or was replaced), numbered (`pinned_seq` is the last one's number), so the lists
    /// and summaries of the nodes with such volumes follow at the cost of the changes.
    /// Bounded: a reader that fell further behind starts over.
    pinned_log: VecDeque<(String, String)>,
    pinned_seq: u64,
    claimed_for: FxHashMap<String, BTreeSet<String>>,
    /// Claims by namespace, then name (looked up per node by the volume limits: no key
    /// is built for a lookup).
    claims: FxHashMap<String, FxHashMap<String, Arc<ClaimInfo>>>,
    classes: FxHashMap<String, Arc<StorageClassInfo>>,
    csi_nodes: FxHashMap<String, Arc<CsiNodeInfo>>,
    /// CSI drivers with an attach limit on some node: the number of such CSINodes.
    limited_drivers: FxHashMap<String, usize>,
    csi_drivers: FxHashMap<String, Arc<CsiDriverInfo>>,
    capacities: FxHashMap<String, Arc<StorageCapacityInfo>>,
    attachments: FxHashMap<String, VolumeAttachmentInfo>,
    /// Pods (bound or assumed) per claim key, for ReadWriteOncePod.
    claim_users: FxHashMap<String, u32>,
    /// Assumed volumes and claims: the API version each replaced.
    assumed_volumes: FxHashMap<String, Option<Arc<PersistentVolumeInfo>>>,
    assumed_claims: FxHashMap<String, Option<Arc<ClaimInfo>>>,
}

/// Whether `fresh` is a newer version than `old` (versions compare as integers, as
/// kube-scheduler's assume cache does; anything else counts as newer).
fn newer(fresh: &str, old: &str) -> bool {
    match (fresh.parse::<u64>(), old.parse::<u64>()) {
        (Ok(f), Ok(o)) => f > o,
        _ => fresh != old,
    }
}

impl StorageCatalog {
    pub fn volume(&self, name: &str) -> Option<&PersistentVolumeInfo> {
        self.volumes.get(name).map(Arc::as_ref)
    }

    pub fn claim(&self, namespace: &str, name: &str) -> Option<&ClaimInfo> {
        self.claims
            .get(namespace)
            .and_then(|names| names.get(name))
            .map(Arc::as_ref)
    }

    fn claim_arc(&self, namespace: &str, name: &str) -> Option<Arc<ClaimInfo>> {
        self.claims
            .get(namespace)
            .and_then(|names| names.get(name))
            .cloned()
    }

    fn put_claim(&mut self, claim: Arc<ClaimInfo>) {
        self.claims
            .entry(claim.namespace.clone())
            .or_default()
            .insert(claim.name.clone(), claim);
    }

    pub fn class(&self, name: &str) -> Option<&StorageClassInfo> {
        self.classes.get(name).map(Arc::as_ref)
    }

    pub fn csi_node(&self, node: &str) -> Option<&CsiNodeInfo> {
        self.csi_nodes.get(node).map(Arc::as_ref)
    }

    pub fn csi_driver(&self, name: &str) -> Option<&CsiDriverInfo> {
        self.csi_drivers.get(name).map(Arc::as_ref)
    }

    pub fn capacities(&self) -> impl Iterator<Item = &StorageCapacityInfo> {
        self.capacities.values().map(Arc::as_ref)
    }

    fn index(&mut self, volume: &Arc<PersistentVolumeInfo>) {
        self.by_class
            .entry(volume.storage_class.clone())
            .or_default()
            .insert(volume.name.clone());
        match (&volume.claim_ref, &volume.pinned_hostnames) {
            (None, Some(hosts)) => {
                let by_host = self
                    .unclaimed_pinned
                    .entry(volume.storage_class.clone())
                    .or_default();
                for host in hosts.iter() {
                    let pinned = by_host.entry(self.hostnames.intern(host)).or_default();
                    match pinned.binary_search_by(|v| v.name.cmp(&volume.name)) {
                        Ok(at) => pinned[at] = volume.clone(),
                        Err(at) => pinned.insert(at, volume.clone()),
                    }
                    Self::log_pinned(
                        &mut self.pinned_log,
                        &mut self.pinned_seq,
                        &volume.storage_class,
                        host,
                    );
                }
            }
            (None, None) => {
                self.unclaimed_unpinned
                    .entry(volume.storage_class.clone())
                    .or_default()
                    .insert(volume.name.clone());
            }
            (Some(claim), _) => {
                self.claimed_for
                    .entry(claim_key(&claim.namespace, &claim.name))
                    .or_default()
                    .insert(volume.name.clone());
            }
        }
    }

    fn unindex(&mut self, volume: &PersistentVolumeInfo) {
        fn unlink(map: &mut FxHashMap<String, BTreeSet<String>>, key: &str, name: &str) {
            if let Some(set) = map.get_mut(key) {
                set.remove(name);
                if set.is_empty() {
                    map.remove(key);
                }
            }
        }
        unlink(&mut self.by_class, &volume.storage_class, &volume.name);
        match (&volume.claim_ref, &volume.pinned_hostnames) {
            (None, Some(hosts)) => {
                if let Some(by_host) = self.unclaimed_pinned.get_mut(&volume.storage_class) {
                    for host in hosts.iter() {
                        let Some(host_key) = self.hostnames.find(host) else {
                            continue;
                        };
                        if let Some(pinned) = by_host.get_mut(&host_key) {
                            let before = pinned.len();
                            pinned.retain(|v| v.name != volume.name);
                            if pinned.len() == before {
                                continue;
                            }
                            if pinned.is_empty() {
                                by_host.remove(&host_key);
                            }
                            Self::log_pinned(
                                &mut self.pinned_log,
                                &mut self.pinned_seq,
                                &volume.storage_class,
                                host,
                            );
                        }
                    }
                    if by_host.is_empty() {
                        self.unclaimed_pinned.remove(&volume.storage_class);
                    }
                }
            }
            (None, None) => unlink(
                &mut self.unclaimed_unpinned,
                &volume.storage_class,
                &volume.name,
            ),
            (Some(claim), _) => unlink(
                &mut self.claimed_for,
                &claim_key(&claim.namespace, &claim.name),
                &volume.name,
            ),
        }
    }

    /// The volumes an unbound claim may be matched with on any node: unclaimed ones of its
    /// class not pinned to hostnames, and those (of any class) that name it, in name
    /// order. The pinned ones are [`unclaimed_on_host`](Self::unclaimed_on_host).
    pub fn unpinned_volumes_for_claim<'a>(
        &'a self,
        claim: &ClaimInfo,
    ) -> impl Iterator<Item = &'a Arc<PersistentVolumeInfo>> + 'a {
        let unclaimed = self.unclaimed_unpinned.get(&claim.storage_class);
        let named = self.claimed_for.get(&claim.key());
        unclaimed
            .into_iter()
            .flatten()
            .chain(named.into_iter().flatten())
            .filter_map(|name| self.volumes.get(name))
    }

    /// Unclaimed volumes of a class pinned to this hostname, in name order.
    pub fn unclaimed_on_host<'a>(
        &'a self,
        class: &str,
        host: &str,
    ) -> impl Iterator<Item = &'a Arc<PersistentVolumeInfo>> + 'a {
        self.hostnames
            .find(host)
            .and_then(|host| self.pinned_to(class, &host))
            .into_iter()
            .flatten()
    }

    /// [`unclaimed_on_host`](Self::unclaimed_on_host) for a node's hostname: no string is
    /// read when the node's name was interned here.
    pub fn unclaimed_on_node_host<'a>(
        &'a self,
        class: &str,
        host: &Hostname,
    ) -> impl Iterator<Item = &'a Arc<PersistentVolumeInfo>> + 'a {
        self.pinned_to(class, host).into_iter().flatten()
    }

    fn pinned_to(&self, class: &str, host: &Hostname) -> Option<&Vec<Arc<PersistentVolumeInfo>>> {
        self.unclaimed_pinned.get(class)?.get(host)
    }

    /// Gives a node's hostname the allocation the volume index shares (a node and the
    /// volumes pinned to it then compare by address).
    pub fn intern_hostname(&mut self, host: &mut Option<Hostname>) {
        self.hostnames.intern_in_place(host);
    }

    fn log_pinned(log: &mut VecDeque<(String, String)>, seq: &mut u64, class: &str, host: &str) {
        if log.len() >= MAX_PINNED_LOG {
            log.pop_front();
        }
        log.push_back((class.to_owned(), host.to_owned()));
        *seq += 1;
    }

    /// The number of the last change of a hostname's unclaimed pinned volumes of a class.
    pub fn pinned_seq(&self) -> u64 {
        self.pinned_seq
    }

    /// The (class, hostname) pairs changed after change number `seq`, oldest first;
    /// `None` when some are no longer kept.
    pub fn pinned_changes_since(&self, seq: u64) -> Option<impl Iterator<Item = (&str, &str)>> {
        let behind = usize::try_from(self.pinned_seq.checked_sub(seq)?).ok()?;
        let skip = self.pinned_log.len().checked_sub(behind)?;
        Some(
            self.pinned_log
                .iter()
                .skip(skip)
                .map(|(class, host)| (class.as_str(), host.as_str())),
        )
    }

    /// Whether an unclaimed volume of the class is pinned to the hostname.
    pub fn has_unclaimed_on_host(&self, class: &str, host: &str) -> bool {
        self.hostnames
            .find(host)
            .is_some_and(|host| self.pinned_to(class, &host).is_some())
    }

    /// The hostnames with an unclaimed volume of the class pinned to them.
    pub fn hosts_with_unclaimed<'a>(&'a self, class: &str) -> impl Iterator<Item = &'a str> + 'a {
        self.unclaimed_pinned
            .get(class)
            .into_iter()
            .flat_map(|by_host| by_host.keys().map(Hostname::as_str))
    }

    /// Volumes of one class (`ListPVs`), in name order.
    pub fn volumes_of_class<'a>(
        &'a self,
        class: &str,
    ) -> impl Iterator<Item = &'a Arc<PersistentVolumeInfo>> + 'a {
        self.by_class
            .get(class)
            .into_iter()
            .flatten()
            .filter_map(|name| self.volumes.get(name))
    }

    /// The volume, shared (for state kept over a cycle).
    pub fn volume_arc(&self, name: &str) -> Option<Arc<PersistentVolumeInfo>> {
        self.volumes.get(name).cloned()
    }

    pub fn class_arc(&self, name: &str) -> Option<Arc<StorageClassInfo>> {
        self.classes.get(name).cloned()
    }

    /// Volumes attached to a node.
    pub fn attachments_on<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = &'a VolumeAttachmentInfo> + 'a {
        self.attachments.values().filter(move |a| a.node == node)
    }

    pub fn upsert_attachment(&mut self, attachment: VolumeAttachmentInfo) {
        self.attachments.insert(attachment.name.clone(), attachment);
    }

    pub fn delete_attachment(&mut self, name: &str) {
        self.attachments.remove(name);
    }

    /// Pods (bound or assumed) that use the claim.
    pub fn claim_users(&self, key: &str) -> u32 {
        self.claim_users.get(key).copied().unwrap_or(0)
    }

    pub fn counts(&self) -> (usize, usize) {
        (
            self.volumes.len(),
            self.claims.values().map(FxHashMap::len).sum(),
        )
    }

    pub fn upsert_volume(&mut self, fresh: PersistentVolumeInfo) {
        let name = fresh.name.clone();
        if let Some(original) = self.assumed_volumes.get(&name) {
            let original_version = original
                .as_ref()
                .map_or("", |v| v.resource_version.as_str());
            if !newer(&fresh.resource_version, original_version) {
                // An older or the same version than the assumption was made on.
                self.assumed_volumes.insert(name, Some(Arc::new(fresh)));
                return;
            }
            self.assumed_volumes.remove(&name);
        }
        self.remove_from_class(&name);
        let fresh = Arc::new(fresh);
        self.index(&fresh);
        self.volumes.insert(name, fresh);
    }

    pub fn delete_volume(&mut self, name: &str) {
        self.assumed_volumes.remove(name);
        self.remove_from_class(name);
        self.volumes.remove(name);
    }

    fn remove_from_class(&mut self, name: &str) {
        if let Some(old) = self.volumes.get(name).cloned() {
            self.unindex(&old);
        }
    }

    pub fn upsert_claim(&mut self, fresh: ClaimInfo) {
        let key = fresh.key();
        if let Some(original) = self.assumed_claims.get(&key) {
            let original_version = original
                .as_ref()
                .map_or("", |c| c.resource_version.as_str());
            if !newer(&fresh.resource_version, original_version) {
                self.assumed_claims.insert(key, Some(Arc::new(fresh)));
                return;
            }
            self.assumed_claims.remove(&key);
        }
        self.put_claim(Arc::new(fresh));
    }

    pub fn delete_claim(&mut self, namespace: &str, name: &str) {
        self.assumed_claims.remove(&claim_key(namespace, name));
        if let Some(names) = self.claims.get_mut(namespace) {
            names.remove(name);
            if names.is_empty() {
                self.claims.remove(namespace);
            }
        }
    }

    pub fn upsert_class(&mut self, class: StorageClassInfo) {
        self.classes.insert(class.name.clone(), Arc::new(class));
    }

    pub fn delete_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    pub fn upsert_csi_node(&mut self, node: CsiNodeInfo) {
        for (driver, _) in &node.limits {
            *self.limited_drivers.entry(driver.clone()).or_default() += 1;
        }
        if let Some(old) = self.csi_nodes.insert(node.name.clone(), Arc::new(node)) {
            self.forget_limits(&old);
        }
    }

    pub fn delete_csi_node(&mut self, name: &str) {
        if let Some(old) = self.csi_nodes.remove(name) {
            self.forget_limits(&old);
        }
    }

    fn forget_limits(&mut self, node: &CsiNodeInfo) {
        for (driver, _) in &node.limits {
            if let Some(count) = self.limited_drivers.get_mut(driver) {
                *count -= 1;
                if *count == 0 {
                    self.limited_drivers.remove(driver);
                }
            }
        }
    }

    /// Whether some CSINode limits the volumes of this driver.
    pub fn driver_has_limits(&self, driver: &str) -> bool {
        self.limited_drivers.contains_key(driver)
    }

    pub fn upsert_csi_driver(&mut self, driver: CsiDriverInfo) {
        self.csi_drivers
            .insert(driver.name.clone(), Arc::new(driver));
    }

    pub fn delete_csi_driver(&mut self, name: &str) {
        self.csi_drivers.remove(name);
    }

    pub fn upsert_capacity(&mut self, capacity: StorageCapacityInfo) {
        self.capacities
            .insert(capacity.key.clone(), Arc::new(capacity));
    }

    pub fn delete_capacity(&mut self, key: &str) {
        self.capacities.remove(key);
    }

    /// Counts (or uncounts) the claims of a pod placed on a node.
    pub fn count_claims(&mut self, pod: &PodInfo, delta: i32) {
        for claim in pod.claim_names() {
            let key = claim_key(&pod.namespace, claim);
            let count = self.claim_users.entry(key.clone()).or_default();
            *count = count.saturating_add_signed(delta);
            if *count == 0 {
                self.claim_users.remove(&key);
            }
        }
    }

    /// Sees the plan as written: its volumes bound to their claims, its claims provisioned
    /// on `node` (kube-scheduler's `AssumePodVolumes`).
    pub fn assume(&mut self, plan: &VolumeBindingPlan, node: &str) {
        for binding in &plan.bindings {
            let Some(current) = self.volumes.get(&binding.volume).cloned() else {
                continue;
            };
            let mut bound = (*current).clone();
            bound.claim_ref = Some(binding.claim.clone());
            let bound = Arc::new(bound);
            self.assumed_volumes
                .entry(binding.volume.clone())
                .or_insert(Some(current.clone()));
            self.unindex(&current);
            self.index(&bound);
            self.volumes.insert(binding.volume.clone(), bound);
        }
        for provision in &plan.provisions {
            let key = claim_key(&provision.claim.namespace, &provision.claim.name);
            let Some(current) = self.claim_arc(&provision.claim.namespace, &provision.claim.name)
            else {
                continue;
            };
            let mut selected = (*current).clone();
            selected.selected_node = Some(node.to_owned());
            self.assumed_claims.entry(key).or_insert(Some(current));
            self.put_claim(Arc::new(selected));
        }
    }

    /// Undoes [`assume`](Self::assume) after a failed binding, for what the API has not
    /// shown a newer version of meanwhile.
    pub fn revert(&mut self, plan: &VolumeBindingPlan) {
        for binding in &plan.bindings {
            if let Some(Some(original)) = self.assumed_volumes.remove(&binding.volume) {
                self.remove_from_class(&binding.volume);
                self.index(&original);
                self.volumes.insert(binding.volume.clone(), original);
            }
        }
        for provision in &plan.provisions {
            let key = claim_key(&provision.claim.namespace, &provision.claim.name);
            if let Some(Some(original)) = self.assumed_claims.remove(&key) {
                self.put_claim(original);
            }
        }
    }

    pub fn assumed(&self) -> usize {
        self.assumed_volumes.len() + self.assumed_claims.len()
    }
}
