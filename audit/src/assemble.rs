//! Every workload's audit from resolved images: the verdicts, then the pods running now
//! on nodes their images cannot run on, attached to their workloads.

use std::collections::HashMap;

use multiarch_crd::PodPlacementConfig;
use multiarch_policy::{
    architecture_rules::{ArchitectureRules, RuleSubject},
    platform::Platform,
    pod_configs::NamespacedConfigs,
};

use crate::{
    cluster::RunningPod,
    verdict::{WorkloadAudit, judge, misplaced},
    workloads::{ImageQuery, Workload},
};

/// An image's platforms, or why they are unknown.
pub type Resolved = Result<Vec<Platform>, String>;

/// Audits `workloads` against `targets`; `lookup` answers every query of the workloads
/// (`with_credentials` as they were made) and of the `running` pods.
pub fn audit_workloads(
    workloads: &[Workload],
    configs: &[PodPlacementConfig],
    running: &[RunningPod],
    targets: &[String],
    with_credentials: bool,
    lookup: &dyn Fn(&ImageQuery) -> Resolved,
) -> Vec<WorkloadAudit> {
    let configs = NamespacedConfigs::owned(configs.iter().cloned());
    let rules = ArchitectureRules::compile(&configs, ArchitectureRules::none());
    let mut audits: Vec<WorkloadAudit> = workloads
        .iter()
        .map(|w| {
            let resolved: Vec<Resolved> = w.queries(with_credentials).iter().map(lookup).collect();
            let name = w.pod_name();
            let rule = rules.decide(RuleSubject::of(&w.pod.metadata, &name, &w.namespace));
            judge(w, &resolved, targets, rule.as_ref())
        })
        .collect();
    let index: HashMap<String, usize> = audits
        .iter()
        .enumerate()
        .map(|(i, a)| (a.id(), i))
        .collect();
    for pod in running {
        let Some(&i) = index.get(&pod.workload) else {
            continue;
        };
        let resolved: Vec<Resolved> = pod.queries.iter().map(lookup).collect();
        if let Some(found) = misplaced(pod, &resolved) {
            audits[i].misplaced_pods.push(found);
        }
    }
    audits
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Node;
    use multiarch_crd::UnknownNodeLevel;
    use serde_json::json;

    use super::*;
    use crate::cluster::ClusterWorkloads;

    /// The pods judged misplaced now, (pod, node's platform), with nodes that do not say
    /// their x86-64 level read as `unknown` says.
    fn misplaced_now(unknown: UnknownNodeLevel) -> Vec<(String, String)> {
        let template = json!({"spec": {"containers": [{"name": "app", "image": "amd-only:1"}]}});
        let pod = |name: &str, node: &str, image: &str| {
            json!({"kind": "Pod",
                   "metadata": {"name": name, "namespace": "shop", "uid": name,
                                "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "web", "controller": true}]},
                   "spec": {"nodeName": node, "containers": [{"name": "app", "image": image}]},
                   "status": {"phase": "Running"}})
        };
        let objects = vec![
            json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "uid": "web"},
                   "spec": {"template": template}}),
            pod("on-amd", "amd-1", "amd-only:1"),
            pod("on-arm", "arm-1", "amd-only:1"),
            pod("unknown", "arm-1", "private:1"),
            // Built for x86-64-v3: fine on the unlabelled and the v3 node, not on the v2.
            pod("v3-on-amd", "amd-1", "ubi10:1"),
            pod("v3-on-v3", "amd-v3", "ubi10:1"),
            pod("v3-on-v2", "amd-v2", "ubi10:1"),
            // node-feature-discovery's labels say the node has no AVX2: below v3.
            pod("v3-on-nfd-v2", "amd-nfd", "ubi10:1"),
        ];
        let node = |name: &str, arch: &str, level: Option<&str>| -> Node {
            let mut labels = json!({"kubernetes.io/arch": arch});
            if let Some(level) = level {
                labels["multiarch.openshift.io/arch-variant"] = json!(level);
            }
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
        };
        let nodes = [
            node("amd-1", "amd64", None),
            node("arm-1", "arm64", None),
            node("amd-v2", "amd64", Some("v2")),
            node("amd-v3", "amd64", Some("v3")),
            serde_json::from_value(json!({"metadata": {"name": "amd-nfd", "labels": {
                "kubernetes.io/arch": "amd64",
                "feature.node.kubernetes.io/cpu-cpuid.CMPXCHG8": "true",
                "feature.node.kubernetes.io/cpu-cpuid.LAHF": "true",
                "feature.node.kubernetes.io/cpu-cpuid.AVX": "true"}}}))
            .unwrap(),
        ];
        let cluster = ClusterWorkloads::read(objects, &nodes, unknown).unwrap();
        let known = BTreeMap::from([
            ("amd-only:1", vec![Platform::linux("amd64")]),
            ("ubi10:1", vec![Platform::new("linux", "amd64", Some("v3"))]),
        ]);
        let lookup = |q: &ImageQuery| -> Resolved {
            known
                .get(q.image.as_str())
                .cloned()
                .ok_or_else(|| "unauthorized".to_owned())
        };
        let targets = vec!["amd64".to_owned(), "arm64".to_owned()];
        let audits = audit_workloads(
            &cluster.manifests.workloads,
            &[],
            &cluster.running,
            &targets,
            true,
            &lookup,
        );
        assert_eq!(audits.len(), 1);
        audits[0]
            .misplaced_pods
            .iter()
            .map(|p| (p.pod.clone(), p.architecture.clone()))
            .collect()
    }

    fn pairs(pods: &[(&str, &str)]) -> Vec<(String, String)> {
        pods.iter()
            .map(|(p, a)| ((*p).to_owned(), (*a).to_owned()))
            .collect()
    }

    #[test]
    fn pods_on_nodes_their_images_lack_are_misplaced_now() {
        assert_eq!(
            misplaced_now(UnknownNodeLevel::AnyLevel),
            pairs(&[
                ("on-arm", "arm64"),
                ("v3-on-v2", "amd64/v2"),
                ("v3-on-nfd-v2", "amd64/v2")
            ])
        );
    }

    #[test]
    fn under_baseline_a_node_that_says_no_level_runs_only_v1_builds() {
        // The unlabelled amd64 node, read as x86-64-v1: the v3 pod there is misplaced
        // too, as the scheduler and the correction judge it.
        assert_eq!(
            misplaced_now(UnknownNodeLevel::Baseline),
            pairs(&[
                ("on-arm", "arm64"),
                ("v3-on-amd", "amd64/v1"),
                ("v3-on-v2", "amd64/v2"),
                ("v3-on-nfd-v2", "amd64/v2")
            ])
        );
    }

    #[test]
    fn architecture_rules_decide_and_overrides_are_flagged() {
        let manifests = crate::workloads::Manifests::read(
            r#"
apiVersion: multiarch.openshift.io/v1beta1
kind: PodPlacementConfig
metadata: {name: tiers, namespace: shop}
spec:
  priority: 1
  plugins:
    celArchitecturePlacement:
      enabled: true
      fallbackArchitectures: [amd64]
      rules:
        - {name: db, expression: "self.metadata.labels['tier'] == 'db'", architectures: [ppc64le]}
        - {name: redis, expression: "self.metadata.name.startsWith('redis-')", architectures: [arm64, s390x]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: redis, namespace: shop}
spec: {template: {metadata: {labels: {tier: cache}}, spec: {containers: [{name: c, image: "multi:1"}]}}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: pg, namespace: shop}
spec: {template: {metadata: {labels: {tier: db}}, spec: {containers: [{name: c, image: "multi:1"}]}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: other}
spec: {template: {metadata: {labels: {tier: db}}, spec: {containers: [{name: c, image: "multi:1"}]}}}
"#,
            "default",
        )
        .unwrap();
        assert_eq!(manifests.pod_placement_configs.len(), 1);
        let lookup = |_: &ImageQuery| -> Resolved {
            Ok(vec![Platform::linux("amd64"), Platform::linux("arm64")])
        };
        let targets: Vec<String> = ["amd64", "arm64", "ppc64le", "s390x"]
            .map(String::from)
            .to_vec();
        let audits = audit_workloads(
            &manifests.workloads,
            &manifests.pod_placement_configs,
            &[],
            &targets,
            false,
            &lookup,
        );
        let by_id = |id: &str| audits.iter().find(|a| a.id() == id).unwrap();
        let redis = by_id("shop/Deployment/redis");
        let rule = redis.architecture_rule.as_ref().unwrap();
        assert_eq!(rule.decided_by, "PodPlacementConfig-tiers/redis");
        assert!(!rule.overrides_images);
        // Where the rule sends it and its images run.
        assert_eq!(redis.architectures, ["arm64"]);
        assert_eq!(
            redis.routed_constraint.as_deref(),
            Some(&["arm64".to_owned(), "s390x".to_owned()][..])
        );
        let pg = by_id("shop/StatefulSet/pg");
        assert!(pg.architecture_rule.as_ref().unwrap().overrides_images);
        assert_eq!(
            pg.verdict,
            crate::verdict::Verdict::Blocked {
                reason: "rule \"db\" of PodPlacementConfig tiers places the pod on ppc64le, where its images have no build (images support amd64, arm64); the rule is obeyed".into()
            }
        );
        // Another namespace's config decides nothing here.
        assert!(by_id("other/Deployment/web").architecture_rule.is_none());
        let report = crate::report::AuditReport::new(targets, audits, Default::default());
        assert_eq!(
            (
                report.verdicts.decided_by_rules,
                report.verdicts.rules_override_images
            ),
            (2, 1)
        );
        let table = report.to_table();
        assert!(
            table.contains("architectures ppc64le decided by PodPlacementConfig-tiers/db (OVERRIDES ITS IMAGES)"),
            "{table}"
        );
    }
}
