//! A configuration stored before the CRD refused what it says (kube-scheduler's name)
//! is reconciled under multiarch's own name, and still uninstalls.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::{sync::Arc, time::Duration};

use common::*;
use kube::{Api, api::DeleteParams};
use multiarch_crd::ClusterPodPlacementConfig;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_naming_kube_scheduler_still_uninstalls() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(&server, json!({}), Duration::from_secs(1)).await;
    // Stored around the API (the schema refuses the name now).
    let mut stored = get(
        &server,
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "cluster",
    )
    .unwrap();
    stored["spec"]["placement"] = json!({"schedulerName": "default-scheduler"});
    server.apply("multiarch.openshift.io/clusterpodplacementconfigs", stored);
    eventually("Degraded naming the refused name", || {
        condition(&server, "Degraded").is_some_and(|c| {
            c["message"]
                .as_str()
                .is_some_and(|m| m.contains("schedulerName may not be default-scheduler"))
        })
    })
    .await;
    Api::<ClusterPodPlacementConfig>::all(client(&server))
        .delete("cluster", &DeleteParams::default())
        .await
        .unwrap();
    cppc_gone(&server).await;
    let deprovisioning = condition(&server, "Deprovisioning");
    assert!(
        deprovisioning.is_none(),
        "the object is gone: {deprovisioning:?}"
    );
    assert!(get(&server, "apps/deployments", "multiarch-scheduler").is_none());
    operator.stop().await;
}
