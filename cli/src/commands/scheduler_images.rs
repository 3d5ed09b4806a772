//! Where the scheduler reads images' platforms from: the inspector service, a file of
//! platforms (benchmarks, registry-less runs), or the registries in process.

use std::sync::Arc;

use anyhow::Context;
use multiarch_inspector::{
    ImageInspector, Inspector, cache::CacheOptions, grpc::RemoteInspector,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::KubeSecrets,
    settings::RegistrySettings,
};
use multiarch_scheduler::in_cluster::file_images::FileImages;

use super::{inspector_client::remote_inspector_at, role::Role};
use multiarch_flags::SchedulerArgs;

/// Where images are read from; `remote` is the inspector service when it is one (the
/// scheduler's readiness then follows whether it answers).
pub struct SchedulerImages {
    pub inspector: Arc<dyn ImageInspector>,
    pub remote: Option<RemoteInspector>,
}

/// `--inspector-endpoint`, else `--image-platforms`, else in-process inspection with
/// `--registries-config` (its metrics registered with the role's).
pub fn image_source(
    args: &SchedulerArgs,
    client: &kube::Client,
    role: &mut Role,
) -> anyhow::Result<SchedulerImages> {
    if let Some(endpoint) = &args.inspector_endpoint {
        let remote = remote_inspector_at(endpoint, &args.inspector_tls)?;
        return Ok(SchedulerImages {
            inspector: Arc::new(remote.clone()),
            remote: Some(remote),
        });
    }
    if let Some(path) = &args.image_platforms {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let images = FileImages::from_yaml(&text).with_context(|| path.display().to_string())?;
        return Ok(SchedulerImages {
            inspector: Arc::new(images),
            remote: None,
        });
    }
    let settings = match &args.registries_config {
        Some(path) => RegistrySettings::load(path)?,
        None => RegistrySettings::default(),
    };
    let metrics = InspectorMetrics::default();
    metrics.register(&mut role.registry);
    Ok(SchedulerImages {
        inspector: Arc::new(Inspector::new(
            settings,
            RegistryOptions::default(),
            CacheOptions::default(),
            Arc::new(KubeSecrets::start(client.clone(), &role.tasks)),
            metrics,
        )),
        remote: None,
    })
}
