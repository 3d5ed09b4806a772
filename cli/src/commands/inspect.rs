//! `multiarch inspect IMAGE`: the platforms of an image, from its registry.

use multiarch_inspector::{ImageInspector, InspectRequest};

use super::local_inspector::{local_inspector, static_keyring};
use crate::args::{InspectArgs, OutputFormat};

pub async fn run(args: &InspectArgs) -> anyhow::Result<()> {
    let inspector = local_inspector(
        &args.registry,
        std::sync::Arc::new(static_keyring(&args.registry)?),
    )?;
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
            if info.operator_bundle {
                println!(
                    "  (an OLM bundle image: manifests, never executed; placed on every architecture)"
                );
            }
        }
    }
    Ok(())
}
