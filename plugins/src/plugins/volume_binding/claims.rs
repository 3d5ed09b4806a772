//! The pod's claims as a cycle sees them: looked up once in PreFilter, with what each
//! unbound claim may use, so Filter does no lookup per node.

use std::sync::Arc;

use crate::model::{
    hostname::Hostname,
    local_volume_nodes::LocalVolumes,
    storage::{ClaimInfo, NO_PROVISIONER, PersistentVolumeInfo, StorageCatalog, StorageClassInfo},
};

/// The pod's claims and what they may use, looked up once per cycle so that Filter
/// does no lookup per node.
#[derive(Clone, Default)]
pub(super) struct ClaimsState {
    /// Fully bound claims, with their volume (`None`: it does not exist).
    pub(super) bound: Vec<(ClaimInfo, Option<Arc<PersistentVolumeInfo>>)>,
    /// Unbound claims of WaitForFirstConsumer classes, smallest request first.
    pub(super) delayed: Vec<DelayedClaim>,
}

#[derive(Clone)]
pub(super) struct DelayedClaim {
    pub(super) claim: ClaimInfo,
    /// The volumes it may use on any node (`ClaimInfo::may_use`): unclaimed ones not
    /// pinned to hostnames and those that name it. Volumes pinned to a hostname are
    /// looked up per node in the catalog's index.
    pub(super) anywhere: Vec<Arc<PersistentVolumeInfo>>,
    pub(super) class: Option<Arc<StorageClassInfo>>,
    /// The class's CSI driver publishes storage capacity: provisioning is checked
    /// against it.
    pub(super) capacity_tracked: bool,
    /// No unclaimed volume of the class is pinned to any host.
    pub(super) none_pinned: bool,
    /// The nodes with unclaimed volumes of the class pinned to them, with summaries of
    /// those volumes, when the summaries answer for this claim alone (see
    /// [`DelayedClaim::served_without_reading`]).
    pub(super) local: Option<LocalVolumes>,
}

impl DelayedClaim {
    pub(super) fn new(storage: &StorageCatalog, claim: ClaimInfo) -> Self {
        let anywhere = storage
            .unpinned_volumes_for_claim(&claim)
            .filter(|v| claim.may_use(v))
            .cloned()
            .collect();
        let class = storage.class_arc(&claim.storage_class);
        let capacity_tracked = class.as_ref().is_some_and(|c| {
            storage
                .csi_driver(&c.provisioner)
                .is_some_and(|d| d.storage_capacity)
        });
        let none_pinned = storage
            .hosts_with_unclaimed(&claim.storage_class)
            .next()
            .is_none();
        DelayedClaim {
            claim,
            anywhere,
            class,
            capacity_tracked,
            none_pinned,
            local: None,
        }
    }

    /// Whether the claim finds a volume on the node at `position` without reading the
    /// node's volumes: none when the claim may use no volume at all (it is provisioned or
    /// fits nowhere), else from the summary of the volumes pinned there; `None` when
    /// that cannot tell. Exact where it answers: the claim may use no volume but those
    /// pinned to hostnames (which `matching_volume` would otherwise read node by node),
    /// and the summary describes every one of them.
    pub(super) fn served_without_reading(&self, position: Option<usize>) -> Option<bool> {
        if !self.anywhere.is_empty() {
            return None;
        }
        if self.none_pinned {
            return Some(false);
        }
        self.local.as_ref()?.at(position?).serve(&self.claim)
    }

    /// The volumes a node with this hostname may offer the claim, each with whether its
    /// node affinity is known to fit the node: the index found it under the node's
    /// hostname, and the affinity asks for nothing else.
    pub(super) fn usable_on<'a>(
        &'a self,
        storage: &'a StorageCatalog,
        hostname: Option<&'a Hostname>,
    ) -> impl Iterator<Item = (&'a PersistentVolumeInfo, bool)> + 'a {
        let pinned = hostname
            .into_iter()
            .flat_map(move |host| storage.unclaimed_on_node_host(&self.claim.storage_class, host))
            .filter(|v| self.claim.may_use_unclaimed(v))
            .map(|v| (v.as_ref(), v.hostname_only_affinity));
        self.anywhere
            .iter()
            .map(|v| (v.as_ref(), false))
            .chain(pinned)
    }

    /// Only volumes pinned to hostnames can serve it: none elsewhere, no provisioner, no
    /// node chosen yet.
    pub(super) fn pinned_only(&self) -> bool {
        self.anywhere.is_empty()
            && self.claim.selected_node.is_none()
            && self
                .class
                .as_ref()
                .is_some_and(|c| c.provisioner.is_empty() || c.provisioner == NO_PROVISIONER)
    }
}

/// Positions of a pod's claims, without allocating for the first 64.
#[derive(Default)]
pub(super) struct ClaimSet {
    pub(super) first: u64,
    pub(super) beyond: Vec<usize>,
}

impl ClaimSet {
    pub(super) fn insert(&mut self, i: usize) {
        match u32::try_from(i).ok().filter(|i| *i < 64) {
            Some(bit) => self.first |= 1 << bit,
            None => self.beyond.push(i),
        }
    }

    pub(super) fn contains(&self, i: usize) -> bool {
        match u32::try_from(i).ok().filter(|i| *i < 64) {
            Some(bit) => self.first & (1 << bit) != 0,
            None => self.beyond.contains(&i),
        }
    }
}
