//! The positions of the nodes that have an unclaimed local volume of a storage class:
//! the only nodes a claim that only such volumes can serve may go to (see
//! `VolumeBinding`'s candidate nodes). Rebuilt from the catalog and the hostname index
//! when first asked for a class, then brought up to date from the catalog's log of
//! hostnames that gained or lost such volumes: a cycle pays for the volumes bound since
//! the last one, not for every host of the class.

use std::sync::{Arc, Mutex, PoisonError};

use rustc_hash::FxHashMap;

use super::{hostname_index::HostnameIndex, storage::StorageCatalog};

/// Classes whose lists are kept.
const MAX_CLASSES: usize = 16;

#[derive(Debug)]
struct ClassNodes {
    /// The catalog change and hostname index generation the list is up to date with.
    seq: u64,
    hostnames: u64,
    positions: Vec<usize>,
    shared: Arc<[usize]>,
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

fn rebuild(class: &str, storage: &StorageCatalog, hostnames: &HostnameIndex) -> ClassNodes {
    let mut positions: Vec<usize> = storage
        .hosts_with_unclaimed(class)
        .flat_map(|host| hostnames.nodes(host).iter().copied())
        .collect();
    positions.sort_unstable();
    positions.dedup();
    ClassNodes {
        seq: storage.pinned_seq(),
        hostnames: hostnames.generation(),
        shared: positions.as_slice().into(),
        positions,
    }
}

impl LocalVolumeNodes {
    /// The positions, sorted, of the nodes with an unclaimed volume of `class` pinned to
    /// their hostname.
    pub fn of_class(
        &self,
        class: &str,
        storage: &StorageCatalog,
        hostnames: &HostnameIndex,
    ) -> Arc<[usize]> {
        let mut classes = self.classes.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(kept) = classes.get_mut(class)
            && kept.hostnames == hostnames.generation()
            && let Some(changes) = storage.pinned_changes_since(kept.seq)
        {
            let mut changed = false;
            for (_, host) in changes.filter(|(c, _)| *c == class) {
                let has = storage.has_unclaimed_on_host(class, host);
                for &position in hostnames.nodes(host) {
                    match (kept.positions.binary_search(&position), has) {
                        (Err(at), true) => kept.positions.insert(at, position),
                        (Ok(at), false) => {
                            kept.positions.remove(at);
                        }
                        _ => continue,
                    }
                    changed = true;
                }
            }
            kept.seq = storage.pinned_seq();
            if changed {
                kept.shared = kept.positions.as_slice().into();
            }
            return kept.shared.clone();
        }
        if classes.len() >= MAX_CLASSES && !classes.contains_key(class) {
            // Bounded: a cluster with unusually many local classes starts over.
            classes.clear();
        }
        let fresh = rebuild(class, storage, hostnames);
        let shared = fresh.shared.clone();
        classes.insert(class.to_owned(), fresh);
        shared
    }
}
