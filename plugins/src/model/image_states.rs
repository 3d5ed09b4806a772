//! The images nodes report in `status.images`, for `ImageLocality`'s scoring: each name
//! once for the whole cluster with its size and how many nodes have it (kube-scheduler's
//! `imageStates`), and per node only the sorted ids of its names, 4 bytes each.
//!
//! kube-scheduler keeps every name of every node; the kubelet reports 50 images by
//! default (`nodeStatusMaxImages`, unlimited when -1), each under its tag and digest. A
//! node's report is read up to [`MAX_IMAGES_PER_NODE`] images of
//! [`MAX_NAMES_PER_IMAGE`] names, so a node configured to report everything costs a
//! bounded amount, whatever it pulled.

use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use rustc_hash::FxHashMap;
use thin_vec::ThinVec;

/// Images of one node's report that are read (the kubelet's default reports 50).
pub const MAX_IMAGES_PER_NODE: usize = 128;
/// Names of one image that are read (the kubelet reports a tag and a digest).
pub const MAX_NAMES_PER_IMAGE: usize = 8;

/// One image of a node's `status.images`, as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedImage {
    pub names: Vec<String>,
    pub size_bytes: i64,
}

/// A node's images: as the API reported them until the cluster model takes the node in,
/// then their ids in the cluster's [`ImageStates`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeImages {
    Reported(Box<[ReportedImage]>),
    /// Sorted, each id once.
    Known(ThinVec<u32>),
}

impl Default for NodeImages {
    fn default() -> Self {
        NodeImages::Known(ThinVec::new())
    }
}

impl NodeImages {
    /// The node's `status.images`, bounded (see the module).
    pub fn reported(status: &core::NodeStatus) -> Self {
        let images: Box<[ReportedImage]> = status
            .images
            .iter()
            .flatten()
            .take(MAX_IMAGES_PER_NODE)
            .map(|image| ReportedImage {
                names: image
                    .names
                    .iter()
                    .flatten()
                    .take(MAX_NAMES_PER_IMAGE)
                    .cloned()
                    .collect(),
                size_bytes: image.size_bytes.unwrap_or(0),
            })
            .collect();
        if images.is_empty() {
            NodeImages::default()
        } else {
            NodeImages::Reported(images)
        }
    }

    /// The ids of a node the cluster took in (none before).
    pub fn ids(&self) -> &[u32] {
        match self {
            NodeImages::Known(ids) => ids,
            NodeImages::Reported(_) => &[],
        }
    }
}

/// One name's state: the size its first reporter gave (kube-scheduler keeps that one too)
/// and the nodes that have it.
#[derive(Clone, Debug)]
struct ImageState {
    name: Arc<str>,
    size_bytes: i64,
    nodes: u32,
}

/// What `ImageLocality` reads of one image name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageSummary {
    pub id: u32,
    pub size_bytes: i64,
    /// Nodes that report the name.
    pub nodes: u32,
}

/// Every image name some node reports, by id.
#[derive(Clone, Debug, Default)]
pub struct ImageStates {
    ids: FxHashMap<Arc<str>, u32>,
    /// By id; `None` is a free id (kept in `free`).
    states: Vec<Option<ImageState>>,
    free: Vec<u32>,
}

impl ImageStates {
    /// Counts a node's report: every name of it gains the node (once, however often the
    /// report repeats it). Returns the node's sorted ids.
    pub fn add_node(&mut self, reported: &[ReportedImage]) -> ThinVec<u32> {
        let mut ids: ThinVec<u32> = ThinVec::new();
        for image in reported {
            for name in &image.names {
                let id = match self.ids.get(name.as_str()) {
                    Some(&id) => id,
                    None => self.insert(name, image.size_bytes),
                };
                ids.push(id);
            }
        }
        // A name repeated within the report counts the node once.
        ids.sort_unstable();
        ids.dedup();
        for &id in &ids {
            if let Some(Some(state)) = self.states.get_mut(id as usize) {
                state.nodes += 1;
            }
        }
        ids
    }

    /// A node's new report in place of its `old` ids (kube-scheduler removes the old
    /// report, then adds the new one); a report that names the same images as before
    /// (the usual status update) changes nothing and allocates nothing new.
    pub fn update_node(&mut self, old: &ThinVec<u32>, reported: &[ReportedImage]) -> ThinVec<u32> {
        if self.same_names(old, reported) {
            return old.clone();
        }
        self.remove_node(old);
        self.add_node(reported)
    }

    /// Whether every name of `reported` is known and they are exactly the ids `old`.
    fn same_names(&self, old: &[u32], reported: &[ReportedImage]) -> bool {
        let mut ids = Vec::with_capacity(old.len());
        for name in reported.iter().flat_map(|image| &image.names) {
            match self.ids.get(name.as_str()) {
                Some(&id) => ids.push(id),
                None => return false,
            }
        }
        ids.sort_unstable();
        ids.dedup();
        ids == old
    }

    /// Uncounts a node's ids; a name no node has any more is forgotten.
    pub fn remove_node(&mut self, ids: &[u32]) {
        for &id in ids {
            let Some(slot) = self.states.get_mut(id as usize) else {
                continue;
            };
            let Some(state) = slot else {
                continue;
            };
            state.nodes = state.nodes.saturating_sub(1);
            if state.nodes == 0 {
                self.ids.remove(&state.name);
                *slot = None;
                self.free.push(id);
            }
        }
    }

    fn insert(&mut self, name: &str, size_bytes: i64) -> u32 {
        let name: Arc<str> = Arc::from(name);
        let state = ImageState {
            name: name.clone(),
            size_bytes,
            nodes: 0,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.states[id as usize] = Some(state);
                id
            }
            None => {
                // More names than u32 ids cannot be reported by the nodes a cluster
                // holds (a node's report is bounded); saturate rather than wrap.
                let id = u32::try_from(self.states.len()).unwrap_or(u32::MAX);
                self.states.push(Some(state));
                id
            }
        };
        self.ids.insert(name, id);
        id
    }

    /// The state of `name` when a node reports it.
    pub fn summary(&self, name: &str) -> Option<ImageSummary> {
        let &id = self.ids.get(name)?;
        let state = self.states.get(id as usize)?.as_ref()?;
        Some(ImageSummary {
            id,
            size_bytes: state.size_bytes,
            nodes: state.nodes,
        })
    }

    /// Distinct names some node reports.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(names: &[&str], size_bytes: i64) -> ReportedImage {
        ReportedImage {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            size_bytes,
        }
    }

    #[test]
    fn a_name_counts_each_node_that_reports_it_once() {
        let mut states = ImageStates::default();
        let a = states.add_node(&[image(&["web:1", "web@sha256:1", "web:1"], 40)]);
        let b = states.add_node(&[image(&["web:1"], 99), image(&["db:1"], 7)]);
        assert_eq!(a.len(), 2);
        assert_eq!(b.len(), 2);
        let web = states.summary("web:1").unwrap();
        // The first reporter's size, as kube-scheduler's cache keeps it.
        assert_eq!((web.size_bytes, web.nodes), (40, 2));
        assert_eq!(states.summary("db:1").unwrap().nodes, 1);
        assert!(a.windows(2).all(|w| w[0] < w[1]), "{a:?}");

        states.remove_node(&a);
        assert_eq!(states.summary("web:1").unwrap().nodes, 1);
        assert_eq!(states.summary("web@sha256:1"), None, "no node has it");
        states.remove_node(&b);
        assert!(states.is_empty());
        // A report naming the same images leaves the counts as they are.
        let d = states.add_node(&[image(&["web:1"], 1)]);
        assert_eq!(states.update_node(&d, &[image(&["web:1", "web:1"], 1)]), d);
        assert_eq!(states.summary("web:1").unwrap().nodes, 1);
        // Another report moves the node's counts.
        let d = states.update_node(&d, &[image(&["db:2"], 3)]);
        assert_eq!(states.summary("web:1"), None);
        assert_eq!(states.summary("db:2").unwrap().nodes, 1);
        states.remove_node(&d);
        // Freed ids are used again.
        let c = states.add_node(&[image(&["new:1"], 5)]);
        assert!(c[0] < 3, "{c:?}");
        assert_eq!(states.summary("new:1").unwrap().size_bytes, 5);
    }

    #[test]
    fn a_report_is_read_up_to_its_bounds() {
        let status = core::NodeStatus {
            images: Some(
                (0..MAX_IMAGES_PER_NODE + 50)
                    .map(|i| core::ContainerImage {
                        names: Some((0..20).map(|n| format!("img{i}:{n}")).collect()),
                        size_bytes: Some(1),
                    })
                    .collect(),
            ),
            ..core::NodeStatus::default()
        };
        let NodeImages::Reported(images) = NodeImages::reported(&status) else {
            panic!("not read");
        };
        assert_eq!(images.len(), MAX_IMAGES_PER_NODE);
        assert!(images.iter().all(|i| i.names.len() == MAX_NAMES_PER_IMAGE));
        assert_eq!(
            NodeImages::reported(&core::NodeStatus::default()),
            NodeImages::default()
        );
    }
}
