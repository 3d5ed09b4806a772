//! `multiarch inspector --listen ADDR`: the image-inspection gRPC service; in a cluster it
//! reads the pods' pull secrets itself.

use std::sync::Arc;

use anyhow::Context;
use multiarch_inspector::{
    ImageInspector, Inspector,
    cache::CacheOptions,
    grpc::{self, ServiceLimits},
    metrics::InspectorMetrics,
    registry::RegistryOptions,
    secrets::{KubeSecrets, SecretSource, StaticKeyring},
    settings::RegistrySettings,
    settings_file::{ReloadMetrics, SettingsFile},
};
use tracing::info;

use super::role::Role;
use crate::args::InspectorArgs;

pub async fn run(args: &InspectorArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let settings_file = args.registries_config.as_ref().map(|path| SettingsFile {
        path: path.clone(),
        optional: args.registries_config_optional,
    });
    let settings = match &settings_file {
        Some(file) => file.load()?,
        None => RegistrySettings::default(),
    };
    let secrets: Arc<dyn SecretSource> = if args.no_kubernetes {
        Arc::new(StaticKeyring::default())
    } else {
        let client = args
            .client
            .connect()
            .await
            .context("cannot reach the Kubernetes API to read pull secrets (use --no-kubernetes outside a cluster)")?;
        Arc::new(KubeSecrets::start(client, &role.tasks))
    };
    let metrics = InspectorMetrics::default();
    metrics.register(&mut role.registry);
    let cache = CacheOptions {
        capacity: args.cache_size,
        max_bytes: args.cache_max_mib.saturating_mul(1024 * 1024),
        tag_ttl: args.tag_ttl,
        negative_ttl: args.negative_ttl,
    };
    let registry_options = RegistryOptions {
        connect_timeout: args.connect_timeout,
        total_timeout: args.timeout,
        ..RegistryOptions::default()
    };
    let inspector = Arc::new(Inspector::new(
        settings,
        registry_options,
        cache,
        secrets,
        metrics,
    ));
    if let Some(file) = settings_file {
        let reloads = ReloadMetrics::default();
        reloads.register(&mut role.registry);
        let follower = file.follow(
            inspector.clone(),
            args.registries_config_check,
            reloads,
            role.tasks.shutdown().clone(),
        );
        role.spawn_server("registry settings follower", follower);
    }
    let inspector: Arc<dyn ImageInspector> = inspector;

    let tls = grpc::server_tls(args.tls_dir.as_deref()).with_context(|| {
        let dir = args.tls_dir.as_deref().unwrap_or(std::path::Path::new(""));
        format!("cannot use the TLS files in {}", dir.display())
    })?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    info!(listen = %args.listen, metrics = %args.ops.metrics_addr, mutual_tls = tls.is_some(), "serving image inspection");
    let shutdown = role.tasks.shutdown().clone();
    role.spawn_server(
        "gRPC server",
        grpc::serve(listener, tls, inspector, ServiceLimits::default(), shutdown),
    );
    role.serve_and_wait(args.ops.metrics_addr).await
}
