//! Workloads from manifests (multi-document YAML or JSON, as `kubectl`, `kustomize build`
//! and `helm template` print them): each workload kind's pod template, with its images
//! (init containers included) and its own placement constraint.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodTemplateSpec};
use multiarch_crd::PodPlacementConfig;
use multiarch_policy::pod_images::pull_secret_names;
use serde::Deserialize;
use serde_json::Value;

/// A document that is not YAML, or a workload whose pod template cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WorkloadError {
    #[error("document {index} is not valid YAML: {detail}")]
    Yaml { index: usize, detail: String },
    #[error("{kind} {name}: the pod template cannot be read: {detail}")]
    Template {
        kind: String,
        name: String,
        detail: String,
    },
    #[error("PodPlacementConfig {name}: cannot be read: {detail}")]
    Config { name: String, detail: String },
}

/// One container's image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRef {
    pub container: String,
    pub image: String,
    pub init: bool,
}

/// The images of a pod's init and regular containers (ephemeral containers are debug
/// sessions, not the workload).
pub fn containers_of(spec: &PodSpec) -> Vec<ContainerRef> {
    let init = spec.init_containers.iter().flatten().map(|c| (c, true));
    init.chain(spec.containers.iter().map(|c| (c, false)))
        .map(|(c, init)| ContainerRef {
            container: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            init,
        })
        .collect()
}

/// What an image is inspected with: its name and, from a live cluster, where the pod's
/// pull credentials are (its namespace, pull secrets and service account).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ImageQuery {
    pub image: String,
    pub namespace: String,
    pub pull_secrets: Vec<String>,
    pub service_account: Option<String>,
}

impl ImageQuery {
    /// The queries of a pod's containers, in container order. `with_credentials` false
    /// (manifests: credentials come from the command line) leaves only the image.
    pub fn for_pod(
        namespace: &str,
        spec: &PodSpec,
        containers: &[ContainerRef],
        with_credentials: bool,
    ) -> Vec<ImageQuery> {
        containers
            .iter()
            .map(|c| {
                if !with_credentials {
                    return ImageQuery {
                        image: c.image.clone(),
                        ..ImageQuery::default()
                    };
                }
                ImageQuery {
                    image: c.image.clone(),
                    namespace: namespace.to_owned(),
                    pull_secrets: pull_secret_names(spec),
                    // The API server defaults it; a template read from a file may lack it.
                    service_account: Some(
                        spec.service_account_name
                            .clone()
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| "default".to_owned()),
                    ),
                }
            })
            .collect()
    }
}

/// A workload and the pod it makes.
#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub containers: Vec<ContainerRef>,
    /// The pod template as a pod, for its own `nodeSelector` and affinity.
    pub pod: Pod,
}

/// What the manifests held: workloads, PodPlacementConfigs (their architecture rules
/// decide for the workloads of their namespace), and the other kinds (counted, not
/// audited).
#[derive(Debug, Default)]
pub struct Manifests {
    pub workloads: Vec<Workload>,
    pub pod_placement_configs: Vec<PodPlacementConfig>,
    pub ignored: BTreeMap<String, usize>,
}

/// Where each kind keeps its pod template.
fn template(kind: &str, document: &Value) -> Option<Value> {
    match kind {
        "Deployment"
        | "StatefulSet"
        | "DaemonSet"
        | "ReplicaSet"
        | "Job"
        | "ReplicationController" => document.pointer("/spec/template").cloned(),
        "CronJob" => document.pointer("/spec/jobTemplate/spec/template").cloned(),
        "Pod" => {
            Some(serde_json::json!({"metadata": document["metadata"], "spec": document["spec"]}))
        }
        _ => None,
    }
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

impl Workload {
    /// The name its pods are seen by in architecture rules: a bare pod's own, else the
    /// prefix every pod of the workload's name starts with (`web-` for a Deployment
    /// `web`), which is what `startsWith` rules test.
    pub fn pod_name(&self) -> String {
        if self.kind == "Pod" {
            self.name.clone()
        } else {
            format!("{}-", self.name)
        }
    }

    /// The queries of its containers' images, in container order.
    pub fn queries(&self, with_credentials: bool) -> Vec<ImageQuery> {
        let spec = self.pod.spec.clone().unwrap_or_default();
        ImageQuery::for_pod(&self.namespace, &spec, &self.containers, with_credentials)
    }

    /// `namespace/Kind/name`, as the report names it.
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.kind, self.name)
    }
}

impl Manifests {
    /// Reads every document of `text` (YAML or JSON; `List` objects are opened).
    /// A ReplicaSet or Pod owned by another object is left to its owner, as the owner is
    /// what the manifests (or the cluster) manage.
    pub fn read(text: &str, default_namespace: &str) -> Result<Manifests, WorkloadError> {
        let mut manifests = Manifests::default();
        manifests.add_text(text, default_namespace)?;
        Ok(manifests)
    }

    /// Adds every document of `text`.
    pub fn add_text(&mut self, text: &str, default_namespace: &str) -> Result<(), WorkloadError> {
        for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(document).map_err(|e| WorkloadError::Yaml {
                index: index + 1,
                detail: e.to_string(),
            })?;
            self.add(value, default_namespace)?;
        }
        Ok(())
    }

    /// Adds one object (a `List`'s items each).
    pub fn add(&mut self, object: Value, default_namespace: &str) -> Result<(), WorkloadError> {
        if object.is_null() {
            return Ok(());
        }
        let kind = text(&object, "/kind");
        if kind.ends_with("List")
            && let Some(items) = object["items"].as_array()
        {
            for item in items {
                self.add(item.clone(), default_namespace)?;
            }
            return Ok(());
        }
        if kind == "PodPlacementConfig" {
            let name = text(&object, "/metadata/name");
            let mut config: PodPlacementConfig =
                serde_json::from_value(object).map_err(|e| WorkloadError::Config {
                    name,
                    detail: e.to_string(),
                })?;
            config
                .metadata
                .namespace
                .get_or_insert_with(|| default_namespace.to_owned());
            self.pod_placement_configs.push(config);
            return Ok(());
        }
        let owned = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|owners| !owners.is_empty());
        let template = if owned && matches!(kind.as_str(), "ReplicaSet" | "Pod" | "Job") {
            None
        } else {
            template(&kind, &object)
        };
        let Some(template) = template else {
            *self
                .ignored
                .entry(if kind.is_empty() {
                    "(no kind)".into()
                } else {
                    kind
                })
                .or_default() += 1;
            return Ok(());
        };
        let name = text(&object, "/metadata/name");
        let namespace = match text(&object, "/metadata/namespace") {
            n if n.is_empty() => default_namespace.to_owned(),
            n => n,
        };
        let template: PodTemplateSpec =
            serde_json::from_value(template).map_err(|e| WorkloadError::Template {
                kind: kind.clone(),
                name: name.clone(),
                detail: e.to_string(),
            })?;
        let spec: PodSpec = template.spec.unwrap_or_default();
        self.workloads.push(Workload {
            kind,
            namespace,
            name,
            containers: containers_of(&spec),
            pod: Pod {
                metadata: template.metadata.unwrap_or_default(),
                spec: Some(spec),
                status: None,
            },
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFESTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  template:
    spec:
      initContainers: [{name: migrate, image: "migrate:1"}]
      containers: [{name: app, image: "web:1"}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: report}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          nodeSelector: {kubernetes.io/arch: arm64}
          containers: [{name: report, image: "report:1"}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web-abc, namespace: shop, ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: u}]}
spec: {template: {spec: {containers: [{name: app, image: "web:1"}]}}}
---
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Pod, metadata: {name: debug}, spec: {containers: [{name: sh, image: busybox}]}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: settings}}
"#;

    #[test]
    fn every_workload_kind_gives_its_pod_template_and_the_rest_is_counted() {
        let manifests = Manifests::read(MANIFESTS, "default").unwrap();
        let names: Vec<(&str, &str, &str)> = manifests
            .workloads
            .iter()
            .map(|w| (w.kind.as_str(), w.namespace.as_str(), w.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("Deployment", "shop", "web"),
                ("CronJob", "default", "report"),
                ("Pod", "default", "debug"),
            ]
        );
        assert_eq!(
            manifests.workloads[0].containers,
            [
                ContainerRef {
                    container: "migrate".into(),
                    image: "migrate:1".into(),
                    init: true
                },
                ContainerRef {
                    container: "app".into(),
                    image: "web:1".into(),
                    init: false
                },
            ]
        );
        let ignored: Vec<(&str, usize)> = manifests
            .ignored
            .iter()
            .map(|(k, n)| (k.as_str(), *n))
            .collect();
        assert_eq!(
            ignored,
            [("ConfigMap", 1), ("ReplicaSet", 1), ("Service", 1)]
        );
    }

    #[test]
    fn bad_documents_are_named() {
        let error = Manifests::read("kind: Deployment\n---\n: : :\n", "default").unwrap_err();
        assert!(
            matches!(error, WorkloadError::Yaml { index: 2, .. }),
            "{error}"
        );
        let error = Manifests::read(
            "kind: Deployment\nmetadata: {name: x}\nspec: {template: {spec: {containers: 5}}}\n",
            "default",
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("Deployment x: the pod template cannot be read"),
            "{error}"
        );
    }
}
