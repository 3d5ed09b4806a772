//! The CustomResourceDefinitions generated from the types, as installed from
//! `manifests/crds/`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, ServiceReference, WebhookClientConfig,
    WebhookConversion,
};
use kube::core::crd::{CustomResourceExt, MergeError, merge_crds};

use crate::{
    ENoExecEvent, PodPlacementConfig,
    cluster_pod_placement_config::{v1alpha1, v1beta1},
    names::{CONVERSION_PATH, DEFAULT_NAMESPACE, OPERATOR_SERVICE},
};

/// Rendering the CRDs failed; a bug in the types, never in user input.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("cannot merge the ClusterPodPlacementConfig versions: {0}")]
    Merge(#[from] MergeError),
    #[error("cannot render a CRD as YAML: {0}")]
    Yaml(#[from] serde_yaml_ng::Error),
}

/// Every CRD, sorted by the file name it is installed from.
pub fn crds() -> Result<Vec<CustomResourceDefinition>, RenderError> {
    let mut cppc = merge_crds(
        vec![
            v1alpha1::ClusterPodPlacementConfig::crd(),
            v1beta1::ClusterPodPlacementConfig::crd(),
        ],
        "v1beta1",
    )?;
    cppc.spec.conversion = Some(conversion_webhook());
    let mut all = vec![cppc, PodPlacementConfig::crd(), ENoExecEvent::crd()];
    all.sort_by_key(file_name);
    Ok(all)
}

/// The operator converts between the two versions (`crate::conversion`); it writes the
/// CA bundle (and its namespace, when installed elsewhere) at start.
fn conversion_webhook() -> CustomResourceConversion {
    CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: vec!["v1".into()],
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: DEFAULT_NAMESPACE.into(),
                    name: OPERATOR_SERVICE.into(),
                    path: Some(CONVERSION_PATH.into()),
                    port: Some(443),
                }),
                ..WebhookClientConfig::default()
            }),
        }),
    }
}

/// The file a CRD is checked in as: `<group>_<plural>.yaml`, kubebuilder's convention.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// One CRD as a YAML document (no leading `---`).
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, RenderError> {
    Ok(serde_yaml_ng::to_string(crd)?)
}

/// Every CRD as one multi-document YAML stream, in file-name order.
pub fn all_yaml() -> Result<String, RenderError> {
    let mut out = String::new();
    for crd in crds()? {
        out.push_str("---\n");
        out.push_str(&to_yaml(&crd)?);
    }
    Ok(out)
}
