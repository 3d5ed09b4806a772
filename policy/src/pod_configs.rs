//! The PodPlacementConfigs every role reads, by namespace, shared and never copied: each
//! config is the `Arc` its watch holds, each namespace's list an `Arc` of those, and the
//! whole an `Arc` of the index. A pod is only ever matched against its own namespace's
//! configs, so finding them is one lookup, not a pass over the cluster's.

use std::{collections::HashMap, sync::Arc};

use multiarch_crd::PodPlacementConfig;

#[derive(Clone, Debug, Default)]
pub struct NamespacedConfigs(Arc<HashMap<String, Arc<[Arc<PodPlacementConfig>]>>>);

impl NamespacedConfigs {
    /// The index of `configs` (a config without a namespace is not one any pod sees).
    pub fn new(configs: impl IntoIterator<Item = Arc<PodPlacementConfig>>) -> Self {
        let mut namespaces: HashMap<String, Vec<Arc<PodPlacementConfig>>> = HashMap::new();
        for config in configs {
            if let Some(namespace) = config.metadata.namespace.clone() {
                namespaces.entry(namespace).or_default().push(config);
            }
        }
        NamespacedConfigs(Arc::new(
            namespaces
                .into_iter()
                .map(|(namespace, mut configs)| {
                    // In a fixed order, whatever order the watch kept them in.
                    configs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
                    (namespace, configs.into())
                })
                .collect(),
        ))
    }

    /// The index of configs given by value (tests, one-shot commands).
    pub fn owned(configs: impl IntoIterator<Item = PodPlacementConfig>) -> Self {
        NamespacedConfigs::new(configs.into_iter().map(Arc::new))
    }

    /// The configs of `namespace`, by name.
    pub fn of(&self, namespace: &str) -> &[Arc<PodPlacementConfig>] {
        self.0.get(namespace).map_or(&[], |configs| configs)
    }

    /// Every namespace with configs, with them.
    pub fn namespaces(&self) -> impl Iterator<Item = (&str, &[Arc<PodPlacementConfig>])> {
        self.0
            .iter()
            .map(|(namespace, configs)| (namespace.as_str(), &**configs))
    }

    /// How many configs there are in all.
    pub fn len(&self) -> usize {
        self.0.values().map(|configs| configs.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(namespace: Option<&str>, name: &str) -> PodPlacementConfig {
        let mut config = PodPlacementConfig::new(name, Default::default());
        config.metadata.namespace = namespace.map(str::to_owned);
        config
    }

    #[test]
    fn configs_are_found_by_namespace_in_name_order_and_shared() {
        let shared = Arc::new(config(Some("shop"), "b"));
        let index = NamespacedConfigs::new([
            shared.clone(),
            Arc::new(config(Some("shop"), "a")),
            Arc::new(config(Some("bank"), "c")),
            Arc::new(config(None, "nowhere")),
        ]);
        let names = |ns: &str| -> Vec<String> {
            index
                .of(ns)
                .iter()
                .map(|c| c.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(names("shop"), ["a", "b"]);
        assert_eq!(names("bank"), ["c"]);
        assert!(index.of("other").is_empty());
        assert_eq!(index.len(), 3);
        assert!(
            Arc::ptr_eq(&index.of("shop")[1], &shared),
            "the watch's own copy"
        );
        let copy = index.clone();
        assert!(std::ptr::eq(copy.of("shop"), index.of("shop")));
    }
}
