//! `multiarch inspector --listen ADDR`: the image-inspection gRPC service; in a cluster it
//! reads the pods' pull secrets itself.

use std::sync::Arc;

use anyhow::Context;
use multiarch_inspector::{
    Inspector,
    binary_reads::BinaryReadingOptions,
    cache::CacheOptions,
    grpc::{self, ServiceLimits},
    metrics::InspectorMetrics,
    registry::RegistryOptions,
    secrets::{KubeSecrets, SecretSource, StaticKeyring},
    settings_file::SettingsFile,
};
use tracing::info;

use super::role::Role;
use multiarch_flags::InspectorArgs;

pub async fn run(args: &InspectorArgs) -> anyhow::Result<()> {
    let (mut role, _) = Role::begin(&args.log, true);
    let optional = args.registries_config_optional;
    let settings_file = SettingsFile::named(args.registries_config.as_deref(), optional);
    let settings = SettingsFile::initial(settings_file.as_ref())?;
    let secrets: Arc<dyn SecretSource> = if args.no_kubernetes {
        Arc::new(StaticKeyring::default())
    } else {
        let client = args.client.connect().await.context(
            "cannot reach the Kubernetes API to read pull secrets (use --no-kubernetes outside a cluster)",
        )?;
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
    let mut inspector = Inspector::new(settings, registry_options, cache, secrets, metrics);
    if args.read_binaries {
        inspector = inspector.with_binary_reading(BinaryReadingOptions::default());
    }
    let inspector = Arc::new(inspector);
    if let Some(file) = settings_file {
        let check = args.registries_config_check;
        file.spawn_follower(inspector.clone(), check, &mut role.registry, &role.tasks);
    }

    let tls = grpc::server_tls(args.tls_dir.as_deref()).context("cannot use --tls-dir")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    info!(listen = %args.listen, metrics = %args.ops.metrics_addr, mutual_tls = tls.is_some(), read_binaries = args.read_binaries, "serving image inspection");
    let shutdown = role.tasks.shutdown().clone();
    let server = grpc::serve(listener, tls, inspector, ServiceLimits::default(), shutdown);
    role.tasks.spawn_infallible("gRPC server", server);
    role.serve_and_wait(args.ops.metrics_addr).await
}
