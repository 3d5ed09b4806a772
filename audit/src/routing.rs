//! Which workloads routing reaches (`--routed-only`): the namespaces the
//! ClusterPodPlacementConfig's `namespaceSelector` selects (unset: every namespace), less
//! the pods every path leaves alone (`kube-*` namespaces, multiarch's own, opted out,
//! pinned to the control plane, DaemonSets: the same rules as the webhook's).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use multiarch_policy::{
    exemption::exemption,
    selectors::{LabelSelector, Labels},
};

use crate::workloads::Workload;

pub struct RoutingScope {
    /// `None`: every namespace.
    selector: Option<LabelSelector>,
    /// Every namespace's labels (a namespace not here does not exist: nothing there is
    /// routed).
    namespaces: BTreeMap<String, Labels>,
    own_namespace: String,
}

impl RoutingScope {
    pub fn new(
        selector: Option<&meta::LabelSelector>,
        namespaces: BTreeMap<String, Labels>,
        own_namespace: &str,
    ) -> Self {
        RoutingScope {
            selector: selector.map(LabelSelector::from),
            namespaces,
            own_namespace: own_namespace.to_owned(),
        }
    }

    pub fn routes(&self, workload: &Workload) -> bool {
        if workload.kind == "DaemonSet"
            || exemption(&workload.pod, &workload.namespace, &self.own_namespace).is_some()
        {
            return false;
        }
        let Some(labels) = self.namespaces.get(&workload.namespace) else {
            return false;
        };
        self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Manifests;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_selector_and_the_webhook_exemptions_decide() {
        let manifests = Manifests::read(
            "
kind: Deployment
metadata: {name: web, namespace: shop}
spec: {template: {spec: {containers: [{name: a, image: a}]}}}
---
kind: Deployment
metadata: {name: legacy, namespace: shop}
spec: {template: {metadata: {labels: {multiarch.openshift.io/scheduler: default}}, spec: {containers: [{name: a, image: a}]}}}
---
kind: DaemonSet
metadata: {name: agent, namespace: shop}
spec: {template: {spec: {containers: [{name: a, image: a}]}}}
---
kind: Deployment
metadata: {name: dns, namespace: kube-system}
spec: {template: {spec: {containers: [{name: a, image: a}]}}}
---
kind: Deployment
metadata: {name: batch, namespace: lab}
spec: {template: {spec: {containers: [{name: a, image: a}]}}}
",
            "default",
        )
        .unwrap();
        let namespaces = BTreeMap::from([
            ("shop".to_owned(), labels(&[("team", "shop")])),
            ("lab".to_owned(), labels(&[("team", "lab")])),
            ("kube-system".to_owned(), labels(&[])),
        ]);
        let selector = meta::LabelSelector {
            match_labels: Some(BTreeMap::from([("team".into(), "shop".into())])),
            ..meta::LabelSelector::default()
        };
        let routed = |routing: &RoutingScope| -> Vec<String> {
            manifests
                .workloads
                .iter()
                .filter(|w| routing.routes(w))
                .map(Workload::id)
                .collect()
        };
        let selected = RoutingScope::new(Some(&selector), namespaces.clone(), "multiarch");
        assert_eq!(routed(&selected), ["shop/Deployment/web"]);
        let everywhere = RoutingScope::new(None, namespaces.clone(), "multiarch");
        assert_eq!(
            routed(&everywhere),
            ["shop/Deployment/web", "lab/Deployment/batch"]
        );
        let own = RoutingScope::new(None, namespaces, "lab");
        assert_eq!(routed(&own), ["shop/Deployment/web"]);
    }
}
