//! What an OLM bundle holds, read from its files (`manifests/` and `metadata/`, from a
//! directory or a bundle image's layers): the ClusterServiceVersion's architecture and OS
//! labels (with OLM's defaults), the pod templates of its install deployments and of the
//! bundle's other objects that run pods, their node affinity, and `spec.relatedImages`.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use multiarch_policy::arch_constraint::pinned_architectures;
use serde::Deserialize;
use serde_json::Value;

use crate::workloads::{ContainerRef, Manifests, containers_of};

/// `operatorframework.io/arch.<GOARCH>: supported`.
pub const ARCH_LABEL_PREFIX: &str = "operatorframework.io/arch.";
/// `operatorframework.io/os.<GOOS>: supported`.
pub const OS_LABEL_PREFIX: &str = "operatorframework.io/os.";
/// What OLM assumes of a ClusterServiceVersion without architecture labels.
pub const DEFAULT_ARCHITECTURE: &str = "amd64";
/// What OLM assumes of a ClusterServiceVersion without OS labels.
pub const DEFAULT_OS: &str = "linux";

/// One file of a bundle, its path relative to the bundle's root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleFile {
    pub path: String,
    pub text: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    #[error(
        "the bundle has no ClusterServiceVersion under manifests/ (is this a bundle directory: manifests/ and metadata/?)"
    )]
    NoClusterServiceVersion,
    #[error("the bundle has {0} ClusterServiceVersions; a bundle has one")]
    SeveralClusterServiceVersions(usize),
    #[error("{path}: document {index} is not valid YAML: {detail}")]
    Yaml {
        path: String,
        index: usize,
        detail: String,
    },
    #[error("{path}: {detail}")]
    Object { path: String, detail: String },
}

/// A pod-running object of the bundle: an install deployment of the CSV, or another
/// manifest's workload.
#[derive(Clone, Debug, PartialEq)]
pub struct Operand {
    /// `csv/Deployment/<name>` for an install deployment, `<Kind>/<name>` otherwise.
    pub id: String,
    pub containers: Vec<ContainerRef>,
    /// The architectures its required node affinity (or nodeSelector) allows: `None`
    /// when it has no plain `kubernetes.io/arch` requirement.
    pub allowed_architectures: Option<Vec<String>>,
}

/// One `spec.relatedImages` entry.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RelatedImage {
    pub name: String,
    pub image: String,
}

/// The bundle as the audit reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Bundle {
    /// The ClusterServiceVersion's name.
    pub name: String,
    /// `operators.operatorframework.io.bundle.package.v1` of metadata/annotations.yaml.
    pub package: Option<String>,
    /// The labelled architectures, or OLM's default (`amd64`) when none is labelled.
    pub architectures: BTreeSet<String>,
    pub architectures_labelled: bool,
    /// The labelled OSes, or OLM's default (`linux`).
    pub operating_systems: BTreeSet<String>,
    pub operating_systems_labelled: bool,
    pub operands: Vec<Operand>,
    pub related_images: Vec<RelatedImage>,
}

#[derive(Deserialize)]
struct InstallDeployment {
    #[serde(default)]
    name: String,
    #[serde(default)]
    spec: Option<InstallDeploymentSpec>,
}

#[derive(Deserialize)]
struct InstallDeploymentSpec {
    #[serde(default)]
    template: Option<PodTemplateSpec>,
}

fn is_manifest(path: &str) -> bool {
    path.starts_with("manifests/")
        && [".yaml", ".yml", ".json"]
            .iter()
            .any(|ext| path.ends_with(ext))
}

fn documents(file: &BundleFile) -> Result<Vec<Value>, BundleError> {
    let mut out = Vec::new();
    for (index, document) in serde_yaml_ng::Deserializer::from_str(&file.text).enumerate() {
        let value = Value::deserialize(document).map_err(|e| BundleError::Yaml {
            path: file.path.clone(),
            index: index + 1,
            detail: e.to_string(),
        })?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// The values of the labels with `prefix` set to `supported`.
fn supported(labels: &serde_json::Map<String, Value>, prefix: &str) -> BTreeSet<String> {
    labels
        .iter()
        .filter(|(_, v)| v.as_str() == Some("supported"))
        .filter_map(|(k, _)| k.strip_prefix(prefix))
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
        .collect()
}

fn operand(id: String, template: PodTemplateSpec) -> Operand {
    let spec = template.spec.unwrap_or_default();
    let pod = Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: Some(spec.clone()),
        status: None,
    };
    Operand {
        id,
        containers: containers_of(&spec),
        allowed_architectures: pinned_architectures(&pod),
    }
}

impl Bundle {
    /// Reads a bundle from its files. Files outside `manifests/` and
    /// `metadata/annotations.yaml` are not read.
    pub fn read(files: &[BundleFile]) -> Result<Bundle, BundleError> {
        let mut csvs = Vec::new();
        let mut others = Manifests::default();
        for file in files.iter().filter(|f| is_manifest(&f.path)) {
            for document in documents(file)? {
                if document["kind"] == "ClusterServiceVersion" {
                    csvs.push((file.path.clone(), document));
                } else {
                    others.add(document, "").map_err(|e| BundleError::Object {
                        path: file.path.clone(),
                        detail: e.to_string(),
                    })?;
                }
            }
        }
        let (path, csv) = match csvs.len() {
            0 => return Err(BundleError::NoClusterServiceVersion),
            1 => csvs.remove(0),
            n => return Err(BundleError::SeveralClusterServiceVersions(n)),
        };
        let labels = csv["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let labelled_archs = supported(&labels, ARCH_LABEL_PREFIX);
        let labelled_os = supported(&labels, OS_LABEL_PREFIX);
        let mut operands = Vec::new();
        let deployments = csv
            .pointer("/spec/install/spec/deployments")
            .cloned()
            .unwrap_or(Value::Null);
        let deployments: Vec<InstallDeployment> = if deployments.is_null() {
            Vec::new()
        } else {
            serde_json::from_value(deployments).map_err(|e| BundleError::Object {
                path: path.clone(),
                detail: format!("spec.install.spec.deployments cannot be read: {e}"),
            })?
        };
        for deployment in deployments {
            let template = deployment.spec.and_then(|s| s.template).unwrap_or_default();
            operands.push(operand(
                format!("csv/Deployment/{}", deployment.name),
                template,
            ));
        }
        for workload in others.workloads {
            let spec = workload.pod.spec.clone().unwrap_or_default();
            operands.push(Operand {
                id: format!("{}/{}", workload.kind, workload.name),
                containers: containers_of(&spec),
                allowed_architectures: pinned_architectures(&workload.pod),
            });
        }
        let related_images = csv
            .pointer("/spec/relatedImages")
            .and_then(Value::as_array)
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| RelatedImage {
                        name: e["name"].as_str().unwrap_or_default().to_owned(),
                        image: e["image"].as_str().unwrap_or_default().to_owned(),
                    })
                    .filter(|r| !r.image.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Ok(Bundle {
            name: csv["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            package: package(files),
            architectures_labelled: !labelled_archs.is_empty(),
            architectures: if labelled_archs.is_empty() {
                BTreeSet::from([DEFAULT_ARCHITECTURE.to_owned()])
            } else {
                labelled_archs
            },
            operating_systems_labelled: !labelled_os.is_empty(),
            operating_systems: if labelled_os.is_empty() {
                BTreeSet::from([DEFAULT_OS.to_owned()])
            } else {
                labelled_os
            },
            operands,
            related_images,
        })
    }

    /// Every image the operands run, once, in order of first use.
    pub fn operand_images(&self) -> Vec<String> {
        let mut seen = BTreeSet::new();
        self.operands
            .iter()
            .flat_map(|o| o.containers.iter())
            .filter(|c| !c.image.is_empty() && seen.insert(c.image.clone()))
            .map(|c| c.image.clone())
            .collect()
    }

    /// The operands' images and the related images, once each.
    pub fn all_images(&self) -> Vec<String> {
        let mut images = self.operand_images();
        for related in &self.related_images {
            if !images.contains(&related.image) {
                images.push(related.image.clone());
            }
        }
        images
    }
}

/// The package name of `metadata/annotations.yaml`, when there is one.
fn package(files: &[BundleFile]) -> Option<String> {
    let file = files
        .iter()
        .find(|f| f.path == "metadata/annotations.yaml" || f.path == "metadata/annotations.yml")?;
    let value: Value = serde_yaml_ng::from_str(&file.text).ok()?;
    value["annotations"]["operators.operatorframework.io.bundle.package.v1"]
        .as_str()
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> BundleFile {
        BundleFile {
            path: path.into(),
            text: text.into(),
        }
    }

    const CSV: &str = r#"
apiVersion: operators.coreos.com/v1alpha1
kind: ClusterServiceVersion
metadata:
  name: shop-operator.v1.0.0
  labels:
    operatorframework.io/arch.amd64: supported
    operatorframework.io/arch.s390x: supported
    operatorframework.io/arch.arm64: unsupported
    operatorframework.io/os.linux: supported
spec:
  install:
    strategy: deployment
    spec:
      deployments:
      - name: shop-controller
        spec:
          template:
            spec:
              affinity:
                nodeAffinity:
                  requiredDuringSchedulingIgnoredDuringExecution:
                    nodeSelectorTerms:
                    - matchExpressions:
                      - {key: kubernetes.io/arch, operator: In, values: [amd64, s390x]}
              initContainers: [{name: init, image: "reg/init:1"}]
              containers:
              - {name: manager, image: "reg/manager:1"}
              ephemeralContainers: [{name: debug, image: "reg/debug:1"}]
  relatedImages:
  - {name: manager, image: "reg/manager@sha256:0000000000000000000000000000000000000000000000000000000000000000"}
"#;

    #[test]
    fn the_csv_labels_deployments_and_related_images_are_read() {
        let bundle = Bundle::read(&[
            file("manifests/shop.clusterserviceversion.yaml", CSV),
            file(
                "manifests/job.yaml",
                "kind: Job\nmetadata: {name: migrate}\nspec: {template: {spec: {containers: [{name: m, image: 'reg/migrate:1'}]}}}\n",
            ),
            file("manifests/crd.yaml", "kind: CustomResourceDefinition\nmetadata: {name: shops.example.com}\n"),
            file(
                "metadata/annotations.yaml",
                "annotations:\n  operators.operatorframework.io.bundle.package.v1: shop\n",
            ),
            file("tests/scorecard/config.yaml", "not: [read"),
        ])
        .unwrap();
        assert_eq!(bundle.name, "shop-operator.v1.0.0");
        assert_eq!(bundle.package.as_deref(), Some("shop"));
        assert_eq!(
            bundle.architectures,
            BTreeSet::from(["amd64".to_owned(), "s390x".to_owned()])
        );
        assert!(bundle.architectures_labelled && bundle.operating_systems_labelled);
        assert_eq!(bundle.operands.len(), 2);
        assert_eq!(bundle.operands[0].id, "csv/Deployment/shop-controller");
        assert_eq!(
            bundle.operands[0].allowed_architectures,
            Some(vec!["amd64".to_owned(), "s390x".to_owned()])
        );
        assert_eq!(bundle.operands[1].id, "Job/migrate");
        assert_eq!(bundle.operands[1].allowed_architectures, None);
        // Init containers count, ephemeral containers (debug sessions) do not.
        assert_eq!(
            bundle.operand_images(),
            ["reg/init:1", "reg/manager:1", "reg/migrate:1"]
        );
        assert_eq!(bundle.all_images().len(), 4);
    }

    #[test]
    fn without_labels_olm_assumes_amd64_and_linux() {
        let bundle = Bundle::read(&[file(
            "manifests/csv.yaml",
            "kind: ClusterServiceVersion\nmetadata: {name: bare}\n",
        )])
        .unwrap();
        assert_eq!(bundle.architectures, BTreeSet::from(["amd64".to_owned()]));
        assert_eq!(
            bundle.operating_systems,
            BTreeSet::from(["linux".to_owned()])
        );
        assert!(!bundle.architectures_labelled && !bundle.operating_systems_labelled);
        assert!(bundle.operands.is_empty());
    }

    #[test]
    fn a_directory_without_one_csv_is_an_error() {
        assert_eq!(
            Bundle::read(&[file(
                "manifests/crd.yaml",
                "kind: CustomResourceDefinition\n"
            )]),
            Err(BundleError::NoClusterServiceVersion)
        );
        let csv = "kind: ClusterServiceVersion\nmetadata: {name: a}\n";
        assert_eq!(
            Bundle::read(&[file("manifests/a.yaml", csv), file("manifests/b.yaml", csv)]),
            Err(BundleError::SeveralClusterServiceVersions(2))
        );
        assert!(matches!(
            Bundle::read(&[file("manifests/a.yaml", "kind: [")]),
            Err(BundleError::Yaml { .. })
        ));
    }
}
