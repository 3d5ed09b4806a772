//! The nodes that have an unclaimed local volume of a storage class, and a summary of
//! those volumes per node: the only nodes a claim that only such volumes can serve may go
//! to (see `VolumeBinding`'s candidate nodes), and what its Filter needs to know of them
//! without reading the volumes (see [`HostVolumes`]). Built from the catalog and the
//! hostname index when first asked for a class, then brought up to date from the
//! catalog's log of hostnames whose volumes changed and the index's log of node
//! positions whose hostname changed (nodes added, removed, moved, relabelled): a cycle
//! pays for the changes since the last one, not for every node of the cluster.

use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxHashMap;

use super::{
    hostname_index::HostnameIndex,
    node::NodeInfo,
    storage::{HostVolumes, StorageCatalog},
};

/// Classes whose lists are kept.
const MAX_CLASSES: usize = 16;

/// The nodes with unclaimed local volumes of one class, as of the moment asked.
#[derive(Clone, Debug)]
pub struct LocalVolumes {
    /// Their positions in the cluster's node list, sorted.
    pub nodes: Arc<[usize]>,
    /// By node position: the summary of the volumes pinned to the node's hostname
    /// (nodes past the end have none).
    pub by_position: Arc<Vec<HostVolumes>>,
}

impl LocalVolumes {
    /// The summary for the node at `position`.
    pub fn at(&self, position: usize) -> HostVolumes {
        self.by_position
            .get(position)
            .copied()
            .unwrap_or(HostVolumes::None)
    }
}

#[derive(Debug)]
struct ClassNodes {
    /// The catalog change and hostname index generation the lists are up to date with.
    seq: u64,
    hostnames: u64,
    positions: Vec<usize>,
    shared: LocalVolumes,
}

#[derive(Debug, Default)]
pub struct LocalVolumeNodes {
    /// Cycles read the cluster through `&`, hence the lock; a cycle takes it once.
    classes: Mutex<FxHashMap<String, ClassNodes>>,
}

impl Clone for LocalVolumeNodes {
    fn clone(&self) -> Self {
        LocalVolumeNodes::default()
    }
}

fn summary(class: &str, host: &str, storage: &StorageCatalog) -> HostVolumes {
    HostVolumes::of(storage.unclaimed_on_host(class, host).map(Arc::as_ref))
}

fn rebuild(
    class: &str,
    storage: &StorageCatalog,
    hostnames: &HostnameIndex,
    node_count: usize,
) -> ClassNodes {
    let mut positions = Vec::new();
    let mut by_position = vec![HostVolumes::None; node_count];
    for host in storage.hosts_with_unclaimed(class) {
        let volumes = summary(class, host, storage);
        for &position in hostnames.nodes(host) {
            positions.push(position);
            if let Some(slot) = by_position.get_mut(position) {
                *slot = volumes;
            }
        }
    }
    positions.sort_unstable();
    positions.dedup();
    ClassNodes {
        seq: storage.pinned_seq(),
        hostnames: hostnames.generation(),
        shared: LocalVolumes {
            nodes: positions.as_slice().into(),
            by_position: Arc::new(by_position),
        },
        positions,
    }
}

impl ClassNodes {
    /// Sets what the node at `position` has; whether it moved in or out of the list.
    fn set(&mut self, position: usize, volumes: HostVolumes) -> bool {
        // Copied only while a cycle still holds the previous summaries.
        if let Some(slot) = Arc::make_mut(&mut self.shared.by_position).get_mut(position) {
            *slot = volumes;
        }
        match (
            self.positions.binary_search(&position),
            volumes != HostVolumes::None,
        ) {
            (Err(at), true) => self.positions.insert(at, position),
            (Ok(at), false) => {
                self.positions.remove(at);
            }
            _ => return false,
        }
        true
    }

    /// Brings the lists up to date with the changes since they were; `false` when some
    /// are no longer logged.
    fn follow(
        &mut self,
        class: &str,
        storage: &StorageCatalog,
        hostnames: &HostnameIndex,
        nodes: &[NodeInfo],
    ) -> bool {
        let (Some(volumes_changed), Some(nodes_changed)) = (
            storage.pinned_changes_since(self.seq),
            hostnames.changes_since(self.hostnames),
        ) else {
            return false;
        };
        let mut moved = false;
        if self.shared.by_position.len() != nodes.len() {
            Arc::make_mut(&mut self.shared.by_position).resize(nodes.len(), HostVolumes::None);
        }
        for position in nodes_changed {
            let volumes = nodes
                .get(position)
                .and_then(|n| n.hostname.as_deref())
                .map_or(HostVolumes::None, |host| summary(class, host, storage));
            moved |= self.set(position, volumes);
        }
        for (_, host) in volumes_changed.filter(|(c, _)| *c == class) {
            let volumes = summary(class, host, storage);
            for &position in hostnames.nodes(host) {
                moved |= self.set(position, volumes);
            }
        }
        self.seq = storage.pinned_seq();
        self.hostnames = hostnames.generation();
        if moved {
            self.shared.nodes = self.positions.as_slice().into();
        }
        true
    }
}

impl LocalVolumeNodes {
    /// The nodes with an unclaimed volume of `class` pinned to their hostname, among the
    /// cluster's `nodes`.
    pub fn of_class(
        &self,
        class: &str,
        storage: &StorageCatalog,
        hostnames: &HostnameIndex,
        nodes: &[NodeInfo],
    ) -> LocalVolumes {
        let mut classes = self.classes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(kept) = classes.get_mut(class)
            && kept.follow(class, storage, hostnames, nodes)
        {
            return kept.shared.clone();
        }
        if classes.len() >= MAX_CLASSES && !classes.contains_key(class) {
            // Bounded: a cluster with unusually many local classes starts over.
            classes.clear();
        }
        let fresh = rebuild(class, storage, hostnames, nodes.len());
        let shared = fresh.shared.clone();
        classes.insert(class.to_owned(), fresh);
        shared
    }
}
