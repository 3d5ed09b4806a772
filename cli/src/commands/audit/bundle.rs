//! `multiarch audit --bundle DIR | --bundle-image REF`: an OLM bundle's files from a
//! directory or from its image's layers (no container tool), its images inspected with
//! the audit's registry access, judged, reported; `--cluster` adds the cluster's nodes.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context, bail};
use futures_util::{StreamExt, stream};
use multiarch_audit::bundle::{
    contents::{Bundle, BundleFile},
    findings::{ImageAnswer, ImageFacts},
    report::BundleReport,
};
use multiarch_inspector::{InspectRequest, Inspector, ManifestKind, image_files::FileLimits};
use multiarch_runtime::client;

use super::{REQUIREMENT_NOT_MET, cluster};
use crate::{
    args::{AuditArgs, AuditFormat},
    commands::{
        ExitWith,
        local_inspector::{local_inspector, static_keyring},
    },
};

/// Files of a bundle directory read at most (a bundle is a few manifests).
const MAX_FILES: usize = 1000;
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The bundle's `manifests/` and `metadata/` files.
fn wanted(path: &str) -> bool {
    path.starts_with("manifests/") || path.starts_with("metadata/")
}

fn read_dir(root: &Path) -> anyhow::Result<Vec<BundleFile>> {
    if !root.join("manifests").is_dir() {
        bail!(
            "{} is not a bundle directory: it has no manifests/ (an operator bundle has manifests/ and metadata/)",
            root.display()
        );
    }
    let mut files = Vec::new();
    let mut pending: Vec<PathBuf> = vec![root.join("manifests"), root.join("metadata")];
    while let Some(dir) = pending.pop() {
        if !dir.is_dir() {
            continue;
        }
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("cannot read {}", dir.display()))?
            .filter_map(Result::ok)
            .collect();
        entries.sort_by_key(std::fs::DirEntry::path);
        for entry in entries {
            let path = entry.path();
            let kind = entry.file_type()?;
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            if !kind.is_file() {
                continue;
            }
            if files.len() == MAX_FILES {
                bail!("{} has more than {MAX_FILES} files", root.display());
            }
            if entry.metadata()?.len() > MAX_FILE_BYTES {
                bail!("{} is larger than {MAX_FILE_BYTES} bytes", path.display());
            }
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let relative = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .replace('\\', "/");
            files.push(BundleFile {
                path: relative,
                text,
            });
        }
    }
    Ok(files)
}

async fn read_image(inspector: &Inspector, reference: &str) -> anyhow::Result<Vec<BundleFile>> {
    let request = InspectRequest {
        image: reference.to_owned(),
        ..InspectRequest::default()
    };
    let image = inspector
        .read_image_files(&request, &wanted, FileLimits::default())
        .await
        .with_context(|| format!("cannot read the bundle image {reference}"))?;
    if !image.operator_bundle {
        tracing::warn!(image = %reference, "the image has no operators.operatorframework.io.bundle.* label: read as a bundle anyway");
    }
    image
        .files
        .into_iter()
        .map(|(path, bytes)| {
            let text = String::from_utf8(bytes)
                .with_context(|| format!("{reference}: {path} is not UTF-8 text"))?;
            Ok(BundleFile { path, text })
        })
        .collect()
}

/// Each image's facts; with `binaries`, its builds judged by their binaries (see
/// `images::inspect_one`).
async fn inspect(
    inspector: Arc<Inspector>,
    images: Vec<String>,
    concurrency: usize,
    binaries: bool,
) -> BTreeMap<String, ImageAnswer> {
    stream::iter(images)
        .map(|image| {
            let inspector = inspector.clone();
            async move {
                let request = InspectRequest {
                    image: image.clone(),
                    ..InspectRequest::default()
                };
                let answer = super::images::inspect_one(inspector.as_ref(), &request, binaries)
                    .await
                    .map(|info| ImageFacts {
                        platforms: if binaries {
                            info.runnable_platforms()
                        } else {
                            info.platform_list()
                        },
                        manifest_list: info.kind == ManifestKind::Index,
                        mislabelled_builds: info.mislabelled_builds(),
                    })
                    .map_err(|e| e.to_string());
                (image, answer)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await
}

pub async fn run(args: &AuditArgs) -> anyhow::Result<()> {
    let secrets = Arc::new(static_keyring(&args.registry)?);
    let inspector = Arc::new(super::with_binaries(
        local_inspector(&args.registry, secrets)?,
        args,
    ));
    let (files, source) = match (&args.bundle, &args.bundle_image) {
        (Some(dir), _) => (read_dir(dir)?, dir.display().to_string()),
        (None, Some(reference)) => (read_image(&inspector, reference).await?, reference.clone()),
        (None, None) => bail!("--bundle or --bundle-image names the bundle"),
    };
    let bundle = Bundle::read(&files).with_context(|| format!("bundle {source}"))?;
    let answers = inspect(
        inspector,
        bundle.all_images(),
        usize::from(args.concurrency),
        args.binaries,
    )
    .await;
    let nodes = if args.cluster {
        let kube = client::connect(args.kubeconfig.as_deref()).await?;
        Some(cluster::node_architectures(&kube).await?)
    } else {
        None
    };
    // Judged: the labelled architectures (always), `--arch` or the cluster's, and the
    // one CI requires.
    let mut targets: Vec<String> = match (&args.arch, &nodes) {
        (Some(arch), _) => arch.clone(),
        (None, Some(nodes)) => nodes.keys().cloned().collect(),
        (None, None) => Vec::new(),
    };
    targets.extend(args.require_arch.iter().cloned());
    let mut report = BundleReport::new(&bundle, source, &answers, &targets);
    if let Some(nodes) = nodes {
        report = report.with_cluster_nodes(nodes);
    }
    match args.output {
        AuditFormat::Table => print!("{}", report.to_table()),
        AuditFormat::Markdown => print!("{}", report.to_markdown()),
        AuditFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        AuditFormat::Yaml => print!("{}", serde_yaml_ng::to_string(&report)?),
    }
    let mut failures = Vec::new();
    if report.counts.errors > 0 {
        failures.push(format!(
            "{} error finding(s): the ClusterServiceVersion promises what its images do not keep",
            report.counts.errors
        ));
    }
    if let Some(arch) = &args.require_arch
        && report.cannot_run_on(arch)
    {
        failures.push(format!(
            "the bundle's operands cannot be shown to run on {arch}"
        ));
    }
    if !failures.is_empty() {
        return Err(ExitWith {
            code: REQUIREMENT_NOT_MET,
            message: failures.join("; "),
        }
        .into());
    }
    Ok(())
}
