//! The image the operands run: `--operand-image`, else the operator's own (read from its
//! pod, so that upgrading the operator upgrades them), else the default.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use multiarch_flags::{OperatorArgs, RoleFlags};
use tracing::warn;

use crate::install::IMAGE;

/// `pinned`, else the image of this replica's pod (`POD_NAME` in `namespace`), else
/// [`IMAGE`] with a warning that says how to choose.
pub async fn operand_image(client: &kube::Client, namespace: &str, pinned: Option<&str>) -> String {
    if let Some(image) = pinned {
        return image.to_owned();
    }
    match own_image(client, namespace).await {
        Some(image) => image,
        None => {
            warn!(
                "not in a pod (or its image is unreadable): operands run {IMAGE}; set --operand-image"
            );
            IMAGE.to_owned()
        }
    }
}

async fn own_image(client: &kube::Client, namespace: &str) -> Option<String> {
    let name = std::env::var("POD_NAME").ok()?;
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(&name)
        .await
        .map_err(
            |e| warn!(error = %e, pod = %name, "cannot read the operator's own pod for its image"),
        )
        .ok()?;
    pod.spec?
        .containers
        .iter()
        // The container is named after its subcommand (see `install::workload`).
        .find(|c| c.name == OperatorArgs::SUBCOMMAND)
        .and_then(|c| c.image.clone())
}
