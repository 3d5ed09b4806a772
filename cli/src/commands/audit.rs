//! `multiarch audit -f MANIFESTS`: which workloads can run on which architectures. Images
//! come from the registries (with the inspector's caching, auth file and registry
//! settings, `--concurrency` at a time) or, offline, from `--platforms FILE`.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::Read,
    path::Path,
};

use anyhow::Context;
use futures_util::{StreamExt, stream};
use multiarch_audit::{
    Platform, demo, platforms_file, report::AuditReport, verdict::judge, workloads::Manifests,
};
use multiarch_inspector::{ImageInspector, InspectRequest};

use super::{ExitWith, local_inspector::local_inspector};
use crate::args::{AuditArgs, AuditFormat};

/// Exit code when `--require-arch` is not met (1 is for errors).
const REQUIREMENT_NOT_MET: u8 = 3;

fn read_input(path: &Path, namespace: &str, manifests: &mut Manifests) -> anyhow::Result<()> {
    let mut files = Vec::new();
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        return manifests
            .add_text(&text, namespace)
            .context("standard input");
    }
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        entries.sort();
        files.extend(entries);
    } else {
        files.push(path.to_owned());
    }
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        manifests
            .add_text(&text, namespace)
            .with_context(|| file.display().to_string())?;
    }
    Ok(())
}

async fn resolve(
    args: &AuditArgs,
    images: BTreeSet<String>,
) -> anyhow::Result<BTreeMap<String, Result<Vec<Platform>, String>>> {
    let offline = if args.demo {
        Some((
            "the demo's platforms".to_owned(),
            demo::PLATFORMS.to_owned(),
        ))
    } else if let Some(path) = &args.platforms {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Some((path.display().to_string(), text))
    } else {
        None
    };
    if let Some((source, text)) = offline {
        let known = platforms_file::read(&text).context(source.clone())?;
        return Ok(images
            .into_iter()
            .map(|image| {
                let found = known
                    .get(&image)
                    .cloned()
                    .ok_or_else(|| format!("not in {source}"));
                (image, found)
            })
            .collect());
    }
    let inspector = local_inspector(&args.registry)?;
    let inspector = &inspector;
    Ok(stream::iter(images)
        .map(|image| async move {
            let request = InspectRequest {
                image: image.clone(),
                ..InspectRequest::default()
            };
            let found = inspector
                .inspect(&request)
                .await
                .map(|info| info.platform_list())
                .map_err(|e| e.to_string());
            (image, found)
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await)
}

pub async fn run(args: &AuditArgs) -> anyhow::Result<()> {
    let mut manifests = Manifests::default();
    if args.demo {
        manifests
            .add_text(demo::MANIFESTS, &args.namespace)
            .context("the demo's manifests")?;
    }
    for path in &args.filenames {
        read_input(path, &args.namespace, &mut manifests)?;
    }
    let images: BTreeSet<String> = manifests
        .workloads
        .iter()
        .flat_map(|w| w.containers.iter().map(|c| c.image.clone()))
        .collect();
    let resolved = resolve(args, images).await?;
    let audits = manifests
        .workloads
        .iter()
        .map(|w| {
            let per_container: Vec<Result<Vec<Platform>, String>> = w
                .containers
                .iter()
                .map(|c| {
                    resolved
                        .get(&c.image)
                        .cloned()
                        .unwrap_or_else(|| Err("not resolved".into()))
                })
                .collect();
            judge(w, &per_container, &args.arch)
        })
        .collect();
    let report = AuditReport::new(args.arch.clone(), audits, manifests.ignored);
    match args.output {
        AuditFormat::Table => print!("{}", report.to_table()),
        AuditFormat::Markdown => print!("{}", report.to_markdown()),
        AuditFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        AuditFormat::Yaml => print!("{}", serde_yaml_ng::to_string(&report)?),
    }
    if let Some(arch) = &args.require_arch {
        let cannot = report.cannot_run_on(arch);
        if !cannot.is_empty() {
            return Err(ExitWith {
                code: REQUIREMENT_NOT_MET,
                message: format!(
                    "{} workload(s) cannot run on {arch}: {}",
                    cannot.len(),
                    cannot.join(", ")
                ),
            }
            .into());
        }
    }
    Ok(())
}
