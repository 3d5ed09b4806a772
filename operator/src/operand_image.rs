//! The image the operands run: `--operand-image`, else the operator's own (read from its
//! pod, so that upgrading the operator upgrades them), else, outside a pod, the default.
//! A pod that cannot be read is retried, never taken for "not in a pod": the default
//! image in its place would roll every operand to an image the cluster may not have (as
//! an API server slowed by a tenant's load once made the operator do).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use multiarch_flags::{OperatorArgs, RoleFlags};
use tracing::warn;

use crate::install::IMAGE;

/// Reads of the operator's own pod before it gives up (and exits, for a fresh start).
const ATTEMPTS: u32 = 8;
/// The wait after the first failed read, doubled after each (1 s to 64 s: about two
/// minutes in all).
const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// Why the operands' image is not known.
#[derive(Debug, thiserror::Error)]
pub enum OperandImageError {
    #[error(
        "cannot read the operator's own pod {pod} for the operands' image after {ATTEMPTS} attempts (set --operand-image to go without): {source}"
    )]
    Unreadable {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("the operator's pod {pod} has no container named {container}: set --operand-image")]
    NoContainer {
        pod: String,
        container: &'static str,
    },
}

/// `pinned`, else the image of this replica's pod (`pod_name` in `namespace`, read with
/// retries), else, without a pod name (not in a pod), [`IMAGE`] with a warning that says
/// how to choose.
pub async fn operand_image(
    client: &kube::Client,
    namespace: &str,
    pod_name: Option<&str>,
    pinned: Option<&str>,
) -> Result<String, OperandImageError> {
    operand_image_with(client, namespace, pod_name, pinned, FIRST_BACKOFF).await
}

async fn operand_image_with(
    client: &kube::Client,
    namespace: &str,
    pod_name: Option<&str>,
    pinned: Option<&str>,
    first_backoff: Duration,
) -> Result<String, OperandImageError> {
    if let Some(image) = pinned {
        return Ok(image.to_owned());
    }
    let Some(name) = pod_name.filter(|n| !n.is_empty()) else {
        warn!("not in a pod (POD_NAME unset): operands run {IMAGE}; set --operand-image");
        return Ok(IMAGE.to_owned());
    };
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let mut backoff = first_backoff;
    let mut attempt = 1;
    let pod = loop {
        match pods.get(name).await {
            Ok(pod) => break pod,
            Err(source) if attempt >= ATTEMPTS => {
                return Err(OperandImageError::Unreadable {
                    pod: format!("{namespace}/{name}"),
                    source,
                });
            }
            Err(error) => {
                warn!(%error, pod = %name, attempt, "cannot read the operator's own pod for the operands' image; retrying");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                attempt += 1;
            }
        }
    };
    pod.spec
        .iter()
        .flat_map(|spec| &spec.containers)
        // The container is named after its subcommand (see `install::workload`).
        .find(|c| c.name == OperatorArgs::SUBCOMMAND)
        .and_then(|c| c.image.clone())
        .ok_or_else(|| OperandImageError::NoContainer {
            pod: format!("{namespace}/{name}"),
            container: OperatorArgs::SUBCOMMAND,
        })
}

#[cfg(test)]
mod tests {
    use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault};
    use serde_json::json;

    use super::*;

    fn client(server: &FakeApiServer) -> kube::Client {
        kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap()
    }

    fn pod(container: &str) -> serde_json::Value {
        json!({"metadata": {"name": "operator-0", "namespace": "multiarch"},
            "spec": {"containers": [{"name": container, "image": "registry.example/multiarch:2"}]}})
    }

    #[tokio::test]
    async fn the_operators_own_image_is_read_through_failures_never_replaced_by_the_default() {
        let server = FakeApiServer::start().await;
        server.apply("pods", pod("operator"));
        // The API server fails the first reads: they are retried.
        server.inject(Fault::new(None, "/pods/operator-0", Effect::Status(500)).times(3));
        let image = operand_image_with(
            &client(&server),
            "multiarch",
            Some("operator-0"),
            None,
            Duration::from_millis(1),
        )
        .await
        .unwrap();
        assert_eq!(image, "registry.example/multiarch:2");
        // Failing for good: an error, not the default image.
        server.inject(Fault::new(None, "/pods/operator-0", Effect::Status(500)));
        let failed = operand_image_with(
            &client(&server),
            "multiarch",
            Some("operator-0"),
            None,
            Duration::from_millis(1),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(failed, OperandImageError::Unreadable { .. }),
            "{failed}"
        );
        server.clear_faults();
        // A pod without the operator's container, or none named: said, or the default.
        server.apply("pods", pod("something-else"));
        let missing = operand_image(&client(&server), "multiarch", Some("operator-0"), None)
            .await
            .unwrap_err();
        assert!(matches!(missing, OperandImageError::NoContainer { .. }));
        assert_eq!(
            operand_image(&client(&server), "multiarch", None, None)
                .await
                .unwrap(),
            IMAGE
        );
        assert_eq!(
            operand_image(&client(&server), "multiarch", None, Some("pinned:1"))
                .await
                .unwrap(),
            "pinned:1"
        );
    }
}
