//! `multiarch inspect IMAGE`: the platforms of an image, from its registry.

use std::sync::Arc;

use anyhow::Context;
use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, keyring::Keyring,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};

use crate::args::{InspectArgs, OutputFormat};

pub async fn run(args: &InspectArgs) -> anyhow::Result<()> {
    let settings = match &args.registries_config {
        Some(path) => RegistrySettings::load(path)?,
        None => RegistrySettings::default(),
    };
    let mut keyring = Keyring::default();
    if let Some(path) = &args.authfile {
        let bytes = std::fs::read(path)
            .with_context(|| format!("cannot read auth file {}", path.display()))?;
        keyring
            .add_docker_config_json(&bytes)
            .with_context(|| format!("auth file {}", path.display()))?;
    }
    let options = RegistryOptions {
        total_timeout: args.timeout,
        ..RegistryOptions::default()
    };
    let inspector = Inspector::new(
        settings,
        options,
        CacheOptions::default(),
        Arc::new(StaticKeyring(Arc::new(keyring))),
        InspectorMetrics::default(),
    );
    let request = InspectRequest {
        image: args.image.clone(),
        ..InspectRequest::default()
    };
    let info = inspector.inspect(&request).await?;
    match args.output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&*info)?),
        OutputFormat::Text => {
            let kind = match info.kind {
                multiarch_inspector::ManifestKind::Index => "index",
                multiarch_inspector::ManifestKind::Manifest => "single manifest",
            };
            println!("{} ({kind}, {})", info.image, info.digest);
            for p in &info.platforms {
                let name = p.platform();
                let full = format!(
                    "{}/{}{}",
                    name.os,
                    name.architecture,
                    name.variant.map(|v| format!("/{v}")).unwrap_or_default()
                );
                println!("  {full:<20} {}", p.digest);
            }
            if info.platforms.is_empty() {
                println!("  (no platform: only attestations or unknown entries)");
            }
        }
    }
    Ok(())
}
