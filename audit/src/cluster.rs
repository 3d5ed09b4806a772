//! A live cluster as the audit reads it: its workloads (the top of each ownership chain
//! among the objects listed, so a ReplicaSet is audited as its Deployment and a pod as
//! its controller, while a pod whose owner is not a workload kind, say a custom
//! resource's, is audited as itself), the pods running now with the architecture of
//! their node, and the architectures its nodes have.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Node, Pod};
use multiarch_crd::{UnknownNodeLevel, names::NODE_ARCH_LABEL};
use multiarch_policy::node_level::judged_node_variant;
use serde_json::Value;

use crate::workloads::{ContainerRef, ImageQuery, Manifests, WorkloadError, containers_of};

/// A pod on a node now, with what it needs to be judged against that node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningPod {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// The node's `kubernetes.io/arch`.
    pub architecture: String,
    /// The node's `multiarch.openshift.io/arch-variant` (its x86-64 level, say), or the
    /// level node-feature-discovery's labels show, or what an amd64 node that says nothing
    /// is taken to run (`v1` under `unknownNodeLevel: Baseline`).
    pub variant: Option<String>,
    pub containers: Vec<ContainerRef>,
    /// One per container: the images as the pod runs them (a rollout may be halfway).
    pub queries: Vec<ImageQuery>,
    /// `namespace/Kind/name` of the workload it belongs to.
    pub workload: String,
}

/// What the audit reads from a live cluster.
#[derive(Debug, Default)]
pub struct ClusterWorkloads {
    pub manifests: Manifests,
    pub running: Vec<RunningPod>,
    /// Nodes per architecture.
    pub architectures: BTreeMap<String, usize>,
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The uid of the object's controller (or, without one, its first owner).
fn owner_uid(object: &Value) -> Option<&str> {
    let owners = object.pointer("/metadata/ownerReferences")?.as_array()?;
    owners
        .iter()
        .find(|o| o["controller"].as_bool() == Some(true))
        .or_else(|| owners.first())
        .and_then(|o| o["uid"].as_str())
}

fn kind_of(object: &Value) -> &str {
    str_at(object, "/kind")
}

impl ClusterWorkloads {
    /// Reads `objects` (every object of the workload kinds, pods included, each with its
    /// `kind`) and `nodes`, an amd64 node that does not say its x86-64 level read as
    /// `unknown` says (as placement reads it).
    pub fn read(
        objects: Vec<Value>,
        nodes: &[Node],
        unknown: UnknownNodeLevel,
    ) -> Result<Self, WorkloadError> {
        let mut architectures: BTreeMap<String, usize> = BTreeMap::new();
        let mut node_arch: HashMap<&str, (&str, Option<String>)> = HashMap::new();
        for node in nodes {
            let Some(labels) = node.metadata.labels.as_ref() else {
                continue;
            };
            let arch = labels.get(NODE_ARCH_LABEL);
            if let (Some(name), Some(arch)) = (node.metadata.name.as_deref(), arch) {
                node_arch.insert(name, (arch, judged_node_variant(labels, arch, unknown)));
                *architectures.entry(arch.clone()).or_default() += 1;
            }
        }
        let by_uid: HashMap<&str, &Value> = objects
            .iter()
            .filter_map(|o| Some((o.pointer("/metadata/uid")?.as_str()?, o)))
            .collect();
        // The top of the chain of listed owners (cycles cannot form in the API, but a
        // bad input must not loop).
        let top = |object: &Value| -> String {
            let mut current = object;
            for _ in 0..8 {
                match owner_uid(current).and_then(|uid| by_uid.get(uid)) {
                    Some(owner) => current = owner,
                    None => break,
                }
            }
            let namespace = str_at(current, "/metadata/namespace");
            format!(
                "{namespace}/{}/{}",
                kind_of(current),
                str_at(current, "/metadata/name")
            )
        };
        let mut running = Vec::new();
        for object in objects.iter().filter(|o| kind_of(o) == "Pod") {
            let node = str_at(object, "/spec/nodeName");
            let phase = str_at(object, "/status/phase");
            let Some((arch, variant)) = node_arch.get(node) else {
                continue;
            };
            if matches!(phase, "Succeeded" | "Failed") {
                continue;
            }
            let Ok(pod) = serde_json::from_value::<Pod>(object.clone()) else {
                continue;
            };
            let spec = pod.spec.unwrap_or_default();
            let namespace = pod.metadata.namespace.unwrap_or_default();
            let containers = containers_of(&spec);
            running.push(RunningPod {
                queries: ImageQuery::for_pod(&namespace, &spec, &containers, true),
                namespace,
                name: pod.metadata.name.unwrap_or_default(),
                node: node.to_owned(),
                architecture: (*arch).to_owned(),
                variant: variant.clone(),
                containers,
                workload: top(object),
            });
        }
        let mut manifests = Manifests::default();
        for object in &objects {
            let owned = owner_uid(object).is_some_and(|uid| by_uid.contains_key(uid));
            if owned {
                continue;
            }
            let mut object = object.clone();
            // Owned by something that is not a workload kind: audited as itself.
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.remove("ownerReferences");
            }
            manifests.add(object, "default")?;
        }
        Ok(ClusterWorkloads {
            manifests,
            running,
            architectures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, arch: &str) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {NODE_ARCH_LABEL: arch}}}),
        )
        .unwrap()
    }

    fn pod(name: &str, owner: Option<(&str, &str)>, node: &str, phase: &str) -> Value {
        let mut pod = json!({
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
            "spec": {
                "nodeName": node,
                "serviceAccountName": "web",
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [{"name": "app", "image": "web:2"}],
            },
            "status": {"phase": phase},
        });
        if let Some((kind, name)) = owner {
            pod["metadata"]["ownerReferences"] = json!([{"kind": kind, "name": name, "uid": format!("uid-{name}"), "controller": true}]);
        }
        pod
    }

    fn objects() -> Vec<Value> {
        let template = json!({"spec": {"containers": [{"name": "app", "image": "web:1"}]}});
        vec![
            json!({"kind": "Deployment", "metadata": {"name": "web", "namespace": "shop", "uid": "uid-web"},
                   "spec": {"template": template}}),
            json!({"kind": "ReplicaSet", "metadata": {"name": "web-1", "namespace": "shop", "uid": "uid-web-1",
                   "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "uid-web", "controller": true}]},
                   "spec": {"template": template}}),
            pod("web-1-a", Some(("ReplicaSet", "web-1")), "arm-1", "Running"),
            pod("web-1-b", Some(("ReplicaSet", "web-1")), "", "Pending"),
            pod("done", None, "amd-1", "Succeeded"),
            // Its owner is a custom resource the audit does not list.
            pod("runner", Some(("Runner", "ci")), "amd-1", "Running"),
        ]
    }

    #[test]
    fn owned_objects_are_audited_as_the_top_of_their_chain() {
        let cluster = ClusterWorkloads::read(
            objects(),
            &[node("arm-1", "arm64"), node("amd-1", "amd64")],
            UnknownNodeLevel::AnyLevel,
        )
        .unwrap();
        let ids: Vec<String> = cluster.manifests.workloads.iter().map(|w| w.id()).collect();
        assert_eq!(
            ids,
            ["shop/Deployment/web", "shop/Pod/done", "shop/Pod/runner"]
        );
        assert_eq!(
            cluster.architectures,
            BTreeMap::from([("amd64".into(), 1), ("arm64".into(), 1)])
        );
        // Only pods on a node, not finished, are running.
        let running: Vec<(&str, &str, &str)> = cluster
            .running
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.architecture.as_str(),
                    p.workload.as_str(),
                )
            })
            .collect();
        assert_eq!(
            running,
            [
                ("web-1-a", "arm64", "shop/Deployment/web"),
                ("runner", "amd64", "shop/Pod/runner"),
            ]
        );
        // The pod's own images and credentials, not the template's.
        assert_eq!(
            cluster.running[0].queries,
            [ImageQuery {
                image: "web:2".into(),
                namespace: "shop".into(),
                pull_secrets: vec!["regcred".into()],
                service_account: Some("web".into()),
            }]
        );
    }

    #[test]
    fn an_ownership_cycle_in_bad_input_ends() {
        let mut a = pod("a", Some(("Pod", "b")), "amd-1", "Running");
        a["kind"] = json!("Pod");
        let b = pod("b", Some(("Pod", "a")), "amd-1", "Running");
        let cluster = ClusterWorkloads::read(
            vec![a, b],
            &[node("amd-1", "amd64")],
            UnknownNodeLevel::AnyLevel,
        )
        .unwrap();
        assert_eq!(cluster.running.len(), 2);
        assert!(cluster.manifests.workloads.is_empty());
    }
}
