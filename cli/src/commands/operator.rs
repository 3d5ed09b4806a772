//! `multiarch operator`: installs every role from the ClusterPodPlacementConfig and
//! serves the CRD conversion and validation webhooks.

use std::{collections::BTreeMap, time::Duration};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use multiarch_operator::{
    install::{OPERATOR, Settings},
    metrics::OperatorMetrics,
    run::{OperatorOptions, start},
};
use multiarch_runtime::{https_server, role_args::replica_identity};
use serde_json::Value;
use tracing::{info, warn};

use super::role::Role;
use crate::args::OperatorArgs;

/// The operator's own image, which the operands run unless told otherwise.
async fn own_image(client: &kube::Client, namespace: &str) -> Option<String> {
    let name = std::env::var("POD_NAME").ok()?;
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(&name)
        .await
        .map_err(|e| warn!(error = %e, "cannot read the operator's own pod for its image"))
        .ok()?;
    pod.spec?
        .containers
        .iter()
        .find(|c| c.name == "operator")
        .and_then(|c| c.image.clone())
}

fn settings(args: &OperatorArgs, image: String) -> anyhow::Result<Settings> {
    let mut node_selector = BTreeMap::new();
    for pair in &args.operand_node_selector {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("--operand-node-selector {pair:?}: expected key=value"))?;
        node_selector.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    let tolerations: Vec<Value> = match &args.operand_tolerations {
        Some(text) => serde_json::from_str(text)
            .context("--operand-tolerations: expected a JSON list of tolerations")?,
        None => Vec::new(),
    };
    Ok(Settings {
        namespace: args.namespace.clone(),
        image,
        image_pull_policy: args.operand_image_pull_policy.clone(),
        image_pull_secrets: args.operand_image_pull_secrets.clone(),
        replicas: args.operand_replicas,
        cpu_request: args.operand_cpu_request.clone(),
        memory_request: args.operand_memory_request.clone(),
        memory_limit: args.operand_memory_limit.clone(),
        node_selector,
        tolerations,
        api_server_cidrs: args.api_server_cidrs.clone(),
        api_server_client_ca_config_map: args.api_server_client_ca_config_map.clone(),
        enoexec_daemon_sys_resource: args.enoexec_daemon_sys_resource,
        enoexec_daemon_runtime_socket: args.enoexec_daemon_runtime_socket.clone(),
    })
}

pub async fn run(args: &OperatorArgs) -> anyhow::Result<()> {
    let (mut role, log_filter) = Role::begin(&args.log, false);
    let client = args.client.connect().await?;
    let image = match &args.operand_image {
        Some(image) => image.clone(),
        None => match own_image(&client, &args.namespace).await {
            Some(image) => image,
            None => {
                warn!(
                    "not in a pod (or its image is unreadable): operands run multiarch:0.1.0; set --operand-image"
                );
                multiarch_operator::install::IMAGE.to_owned()
            }
        },
    };
    let identity = replica_identity(OPERATOR);
    let options = OperatorOptions {
        settings: settings(args, image)?,
        election: args.lease.election(&args.namespace, OPERATOR, &identity)?,
        identity,
        drain_timeout: args.drain_timeout,
        route_settle: args.route_settle,
        certificate_check: args.certificate_check,
    };
    info!(image = %options.settings.image, namespace = %options.settings.namespace, "operator starting");
    let metrics = OperatorMetrics::default();
    metrics.register(&mut role.registry);
    let listener = https_server::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    // The webhook server serves the same metrics as the operations server.
    let mut webhook_registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut webhook_registry);
    let running = start(
        client,
        options,
        listener,
        webhook_registry,
        metrics,
        &role.tasks,
    );
    super::role::follow_log_verbosity(&role, log_filter, running.log_verbosity.clone());
    let serving = running.serving.clone();
    let ready = role.ready.clone();
    let shutdown = role.tasks.shutdown().clone();
    role.tasks.spawn("readiness", async move {
        loop {
            ready.store(serving.is_set(), std::sync::atomic::Ordering::SeqCst);
            tokio::select! {
                () = shutdown.cancelled() => return Ok::<(), std::convert::Infallible>(()),
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    });
    role.serve_and_wait(args.ops.metrics_addr).await
}
