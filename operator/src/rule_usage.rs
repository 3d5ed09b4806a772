//! How many architecture rules, and how many bytes of expressions, every
//! PodPlacementConfig of the cluster holds: followed through a watch (paged, each config
//! read and dropped: only its name and its usage are kept), so that the validating
//! webhook checks the cluster's rule budget without listing every config per review.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use futures_util::StreamExt;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use multiarch_crd::{PodPlacementConfig, cel_architecture_placement::RuleUsage};
use multiarch_runtime::{placement_config::CONFIG_PAGE, supervisor::Tasks};
use tracing::warn;

/// Each config's usage, and whether the list is complete.
#[derive(Debug, Default)]
struct Index {
    configs: HashMap<(String, String), RuleUsage>,
    synced: bool,
}

/// The cluster's rule usage, shared by every review.
#[derive(Clone, Debug, Default)]
pub struct ClusterRuleUsage(Arc<RwLock<Index>>);

impl ClusterRuleUsage {
    /// Follows the configs under `tasks` until the shutdown.
    pub fn follow(client: &kube::Client, tasks: &Tasks) -> Self {
        let usage = ClusterRuleUsage::default();
        let index = usage.clone();
        let api = Api::<PodPlacementConfig>::all(client.clone());
        let config = watcher::Config::default().page_size(CONFIG_PAGE);
        let shutdown = tasks.shutdown().clone();
        tasks.spawn_infallible("PodPlacementConfig rule usage", async move {
            let mut events = watcher(api, config).default_backoff().boxed();
            let mut relisted = HashMap::new();
            loop {
                let event = tokio::select! {
                    () = shutdown.cancelled() => return,
                    event = events.next() => event,
                };
                match event {
                    None => return,
                    Some(Err(e)) => {
                        warn!(error = %e, "cannot watch PodPlacementConfigs for their rule usage; retrying");
                    }
                    Some(Ok(event)) => index.apply(event, &mut relisted),
                }
            }
        });
        usage
    }

    fn apply(
        &self,
        event: watcher::Event<PodPlacementConfig>,
        relisted: &mut HashMap<(String, String), RuleUsage>,
    ) {
        let key = |c: &PodPlacementConfig| (c.namespace().unwrap_or_default(), c.name_any());
        let usage = |c: &PodPlacementConfig| {
            RuleUsage::of(c.spec.plugins.cel_architecture_placement.as_ref())
        };
        match event {
            watcher::Event::Init => relisted.clear(),
            watcher::Event::InitApply(config) => {
                relisted.insert(key(&config), usage(&config));
            }
            watcher::Event::InitDone => {
                let mut index = self.write();
                index.configs = std::mem::take(relisted);
                index.synced = true;
            }
            watcher::Event::Apply(config) => {
                self.write().configs.insert(key(&config), usage(&config));
            }
            watcher::Event::Delete(config) => {
                self.write().configs.remove(&key(&config));
            }
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether every config has been listed once.
    pub fn synced(&self) -> bool {
        self.read().synced
    }

    /// Every config's usage together, but the one named (it is being rewritten).
    pub fn total_without(&self, namespace: &str, name: &str) -> RuleUsage {
        self.read()
            .configs
            .iter()
            .filter(|((ns, n), _)| ns != namespace || n != name)
            .fold(RuleUsage::default(), |sum, (_, usage)| sum.plus(*usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(namespace: &str, name: &str, rules: usize) -> PodPlacementConfig {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"plugins": {"celArchitecturePlacement": {"enabled": true,
                "fallbackArchitectures": ["amd64"],
                "rules": (0..rules).map(|i| serde_json::json!({"name": format!("r{i}"),
                    "expression": "true", "architectures": ["arm64"]})).collect::<Vec<_>>()}}},
        }))
        .unwrap()
    }

    #[test]
    fn the_usage_follows_lists_and_changes() {
        let usage = ClusterRuleUsage::default();
        let mut relisted = HashMap::new();
        usage.apply(watcher::Event::Init, &mut relisted);
        usage.apply(
            watcher::Event::InitApply(config("a", "x", 2)),
            &mut relisted,
        );
        assert!(!usage.synced(), "not before the list is done");
        usage.apply(watcher::Event::InitDone, &mut relisted);
        assert!(usage.synced());
        usage.apply(watcher::Event::Apply(config("b", "y", 3)), &mut relisted);
        let total = usage.total_without("none", "none");
        assert_eq!((total.rules, total.expression_bytes), (5, 20));
        assert_eq!(usage.total_without("b", "y").rules, 2, "the one rewritten");
        usage.apply(watcher::Event::Delete(config("a", "x", 2)), &mut relisted);
        assert_eq!(usage.total_without("none", "none").rules, 3);
        // A relist replaces everything at its end.
        usage.apply(watcher::Event::Init, &mut relisted);
        usage.apply(watcher::Event::InitDone, &mut relisted);
        assert_eq!(usage.total_without("none", "none").rules, 0);
    }
}
