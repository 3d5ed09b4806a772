//! The periodic scan of the pods on nodes: a page of names at a time, each pod looked at
//! read alone, the nodes' platforms (architecture and level) from their watch.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt, api::ListParams, core::PartialObjectMeta};
use multiarch_crd::{UnknownNodeLevel, names::NODE_ARCH_LABEL};
use multiarch_policy::node_level::judged_node_variant;
use multiarch_policy::platform::Platform;
use tracing::{info, warn};

use super::{Correction, Judgement, distinct, verdict::node_platform};

/// Pods' names per page of a scan's list.
const SCAN_PAGE: u32 = 500;
/// How long a scan or a report waits for the node watch's first list.
const NODES_LISTED: Duration = Duration::from_secs(30);

impl Correction {
    /// One pass over the pods on nodes, at most `max_pods` of them, starting after the
    /// last one the previous pass looked at. The pods are found by a paged, metadata-only
    /// list (names only, a page at a time) and each one looked at is read alone: a scan
    /// never holds the cluster's pods, and the nodes come from a watch.
    pub async fn scan(&self, max_pods: usize) -> Result<Vec<Judgement>, kube::Error> {
        let Some(settings) = self.settings().await? else {
            return Ok(Vec::new());
        };
        let Some(nodes) = self.node_platforms(settings.unknown_node_level).await else {
            return Ok(Vec::new());
        };
        let platforms = distinct(nodes.values());
        let cursor = self
            .scan_cursor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let chosen = self.next_pods(cursor.as_ref(), max_pods).await?;
        if let Some(last) = chosen.last() {
            *self
                .scan_cursor
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(last.clone());
        }
        let mut outcomes = Vec::new();
        for (namespace, name) in chosen {
            let Some(pod) = Api::<Pod>::namespaced(self.client.clone(), &namespace)
                .get_opt(&name)
                .await?
            else {
                continue;
            };
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            // Running (crash-looping included) or Pending on a node (an image that cannot
            // be pulled for it): on a node, not finished.
            if !matches!(phase, Some("Running" | "Pending")) {
                continue;
            }
            let Some(node) = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .and_then(|n| nodes.get(n))
            else {
                continue;
            };
            outcomes.push(self.judge(&pod, node, &settings, &platforms).await?);
        }
        Ok(outcomes)
    }

    /// The first `max_pods` pods on nodes after `cursor` (by namespace and name), from
    /// the start again when fewer follow it: read a page of names at a time.
    async fn next_pods(
        &self,
        cursor: Option<&(String, String)>,
        max_pods: usize,
    ) -> Result<Vec<(String, String)>, kube::Error> {
        let api = Api::<PartialObjectMeta<Pod>>::all(self.client.clone());
        let mut params = ListParams::default()
            .fields("spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed")
            .limit(SCAN_PAGE);
        // The smallest keys after the cursor, and the smallest of all (to wrap around).
        let (mut after, mut first) = (BTreeSet::new(), BTreeSet::new());
        let keep = |set: &mut BTreeSet<(String, String)>, key: (String, String)| {
            set.insert(key);
            if set.len() > max_pods {
                set.pop_last();
            }
        };
        loop {
            let page = api.list(&params).await?;
            for pod in page.items {
                let key = (
                    pod.metadata.namespace.unwrap_or_default(),
                    pod.metadata.name.unwrap_or_default(),
                );
                if cursor.is_none_or(|c| key > *c) {
                    keep(&mut after, key.clone());
                }
                keep(&mut first, key);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        let mut chosen: Vec<(String, String)> = after.into_iter().collect();
        for key in first {
            if chosen.len() >= max_pods {
                break;
            }
            if !chosen.contains(&key) {
                chosen.push(key);
            }
        }
        Ok(chosen)
    }

    /// Each node's platform (its architecture and level labels, a level nothing says
    /// read as `unknown` says), once the node watch has listed them (`None` before: an
    /// empty cluster is not read from a watch that has not answered yet).
    pub(super) async fn node_platforms(
        &self,
        unknown: UnknownNodeLevel,
    ) -> Option<BTreeMap<String, Platform>> {
        if tokio::time::timeout(NODES_LISTED, self.nodes.wait_until_ready())
            .await
            .is_err()
        {
            warn!("the node watch has not listed the nodes yet: no pod judged until it has");
            return None;
        }
        Some(
            self.nodes
                .state()
                .iter()
                .filter_map(|n| {
                    let labels = n.labels();
                    let arch = labels.get(NODE_ARCH_LABEL)?;
                    Some((
                        n.metadata.name.clone()?,
                        node_platform(arch, judged_node_variant(labels, arch, unknown).as_deref()),
                    ))
                })
                .collect(),
        )
    }
}

/// Scans every `interval` until `stop`; errors are logged and the next scan tries again.
/// `stop` (the lease lost, or shutdown) ends a scan under way too: a replica that may no
/// longer lead evicts nothing more.
pub async fn scan_every(
    correction: Arc<Correction>,
    interval: Duration,
    max_pods: usize,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let scanned = tokio::select! {
            () = stop.cancelled() => return,
            scanned = correction.scan(max_pods) => scanned,
        };
        match scanned {
            Ok(outcomes) if !outcomes.is_empty() => {
                info!(pods = outcomes.len(), "misplaced-pod scan done");
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "misplaced-pod scan failed; trying again at the next"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(interval) => {}
        }
    }
}
