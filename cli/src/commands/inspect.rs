//! `multiarch inspect IMAGE [--binaries]`: the platforms of an image, from its registry,
//! and with `--binaries` what each platform's build really runs.

use multiarch_inspector::ImageInspector;
use multiarch_inspector::{
    ImageInfo, InspectError, InspectRequest, Inspector, ManifestKind,
    binary_reading::{BinaryFacts, BinaryLimits},
};
use multiarch_policy::platform::Platform;
use serde_json::json;

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
    let binaries = if args.binaries {
        Some(read_binaries(&inspector, &request, &info).await)
    } else {
        None
    };
    match args.output {
        OutputFormat::Json => {
            let mut out = serde_json::to_value(&*info)?;
            if let Some(binaries) = &binaries {
                out["binaries"] = binaries
                    .iter()
                    .map(|(platform, read)| match read {
                        Ok(facts) => serde_json::to_value(facts).unwrap_or_default(),
                        Err(e) => json!({"platform": platform.to_string(), "error": e.to_string()}),
                    })
                    .collect();
            }
            println!("{}", serde_json::to_string_pretty(&out)?);
        }
        OutputFormat::Text => print_text(&info, binaries.as_deref()),
    }
    let failed = binaries
        .iter()
        .flatten()
        .filter(|(_, read)| read.is_err())
        .count();
    if failed > 0 {
        anyhow::bail!("the binaries of {failed} platform(s) could not be read (see above)");
    }
    Ok(())
}

type Read = (Platform, Result<BinaryFacts, InspectError>);

/// Each linux platform's binaries (an image of one manifest: its own), one at a time:
/// each read streams layers.
async fn read_binaries(
    inspector: &Inspector,
    request: &InspectRequest,
    info: &ImageInfo,
) -> Vec<Read> {
    let mut out = Vec::new();
    match info.kind {
        ManifestKind::Manifest => {
            let platform = info
                .platform_list()
                .into_iter()
                .next()
                .unwrap_or_else(|| Platform::linux("amd64"));
            let read = inspector
                .read_binaries(request, None, BinaryLimits::default())
                .await;
            out.push((platform, read));
        }
        ManifestKind::Index => {
            for platform in info.platform_list() {
                if platform.os != "linux" {
                    continue;
                }
                let read = inspector
                    .read_binaries(request, Some(&platform), BinaryLimits::default())
                    .await;
                out.push((platform, read));
            }
        }
    }
    out
}

fn print_text(info: &ImageInfo, binaries: Option<&[Read]>) {
    let kind = match info.kind {
        ManifestKind::Index => "index",
        ManifestKind::Manifest => "single manifest",
    };
    println!("{} ({kind}, {})", info.image, info.digest);
    for p in &info.platforms {
        let platform = p.platform();
        println!("  {:<20} {}", full_name(&platform), p.digest);
        let Some(read) = binaries.and_then(|b| b.iter().find(|(q, _)| *q == platform)) else {
            continue;
        };
        match &read.1 {
            Ok(facts) => print_facts(facts),
            Err(e) => println!("      cannot read its binaries: {e}"),
        }
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

fn full_name(platform: &Platform) -> String {
    format!(
        "{}/{}{}",
        platform.os,
        platform.architecture,
        platform
            .variant
            .as_deref()
            .map(|v| format!("/{v}"))
            .unwrap_or_default()
    )
}

fn print_facts(facts: &BinaryFacts) {
    let program = &facts.program;
    for script in &facts.scripts {
        println!("      {script}: a script (#!)");
    }
    let linking = match (&program.interpreter, &facts.interpreter) {
        (None, _) => "static".to_owned(),
        (Some(named), Some(loader)) if *named != loader.path => {
            format!("dynamic, loader {named} -> {}", loader.path)
        }
        (Some(named), _) => format!("dynamic, loader {named}"),
    };
    println!(
        "      runs {}: {} ELF {}-bit {}, {linking}",
        program.path,
        program.architecture,
        program.bits,
        if program.big_endian { "MSB" } else { "LSB" },
    );
    match facts.x86_64_level() {
        Some(level) => println!("      needs x86-64-v{level} (its ISA notes)"),
        None if program.architecture == "amd64" => {
            println!("      needs no x86-64 level (no ISA notes)")
        }
        None => {}
    }
    if let Some(real) = facts.mislabelled() {
        println!(
            "      MISLABELLED: the platform says {}, its binary is {real}",
            facts.platform.architecture
        );
    }
    println!("      ({} bytes of layers read)", facts.fetched_bytes);
}
