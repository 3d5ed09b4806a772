//! Where the scheduler reads images' platforms from: the inspector service, a file of
//! platforms (benchmarks, registry-less runs), or the registries in process.

use std::sync::Arc;

use anyhow::Context;
use multiarch_inspector::{
    ImageInspector, Inspector, cache::CacheOptions, metrics::InspectorMetrics,
    registry::RegistryOptions, secrets::KubeSecrets, settings::RegistrySettings,
};
use multiarch_scheduler::in_cluster::file_images::FileImages;

use super::{inspector_client::remote_inspector_at, role::Role};
use multiarch_flags::SchedulerArgs;

/// `--inspector-endpoint`, else `--image-platforms`, else in-process inspection with
/// `--registries-config` (its metrics registered with the role's).
pub fn image_source(
    args: &SchedulerArgs,
    client: &kube::Client,
    role: &mut Role,
) -> anyhow::Result<Arc<dyn ImageInspector>> {
    if let Some(endpoint) = &args.inspector_endpoint {
        return Ok(Arc::new(remote_inspector_at(
            endpoint,
            &args.inspector_tls,
        )?));
    }
    if let Some(path) = &args.image_platforms {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let images = FileImages::from_yaml(&text).with_context(|| path.display().to_string())?;
        return Ok(Arc::new(images));
    }
    let settings = match &args.registries_config {
        Some(path) => RegistrySettings::load(path)?,
        None => RegistrySettings::default(),
    };
    let metrics = InspectorMetrics::default();
    metrics.register(&mut role.registry);
    Ok(Arc::new(Inspector::new(
        settings,
        RegistryOptions::default(),
        CacheOptions::default(),
        Arc::new(KubeSecrets::start(client.clone(), &role.tasks)),
        metrics,
    )))
}
