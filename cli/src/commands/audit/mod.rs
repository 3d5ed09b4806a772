//! `multiarch audit`: which workloads can run on which architectures. Workloads come
//! from manifests (`-f`), the live cluster (`--cluster`) or both; images from the
//! registries (the inspector's caching, registry settings and, in a cluster, the pods'
//! pull secrets) or, offline, from `--platforms FILE`.

mod bundle;
mod cluster;
mod images;
mod input;

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use anyhow::{Context, bail};
use multiarch_audit::{
    assemble::{Resolved, audit_workloads},
    cluster::{ClusterWorkloads, RunningPod},
    demo, platforms_file,
    report::AuditReport,
    workloads::{ImageQuery, Manifests},
};
use multiarch_crd::{Architecture, UnknownNodeLevel};
use multiarch_inspector::{
    ImageInspector, Inspector,
    binary_reads::BinaryReadingOptions,
    secrets::{KubeSecrets, SecretSource},
};
use multiarch_runtime::client;

use super::{
    ExitWith,
    local_inspector::{local_inspector, static_keyring},
};
use crate::args::{AuditArgs, AuditFormat};

/// Exit code when `--require-arch` is not met (1 is for errors).
const REQUIREMENT_NOT_MET: u8 = 3;
/// The images' answers: offline from a file, or from the registries.
async fn resolve(
    args: &AuditArgs,
    queries: BTreeSet<ImageQuery>,
    kube: Option<&kube::Client>,
) -> anyhow::Result<images::Inspected> {
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
        return Ok(images::Inspected {
            resolved: images::offline(queries, &known, &source),
            mislabelled: BTreeSet::new(),
        });
    }
    let secrets: Arc<dyn SecretSource> = match kube {
        Some(client) => Arc::new(KubeSecrets::snapshot(client.clone())),
        None => Arc::new(static_keyring(&args.registry)?),
    };
    let inspector: Arc<dyn ImageInspector> = Arc::new(with_binaries(
        local_inspector(&args.registry, secrets)?,
        args,
    ));
    Ok(images::inspect(
        queries,
        inspector,
        usize::from(args.concurrency),
        args.binaries,
    )
    .await)
}

/// `inspector`, reading images' binaries with `--binaries` (as many at once as images
/// are inspected: the audit waits for them).
fn with_binaries(inspector: Inspector, args: &AuditArgs) -> Inspector {
    if !args.binaries {
        return inspector;
    }
    inspector.with_binary_reading(BinaryReadingOptions {
        concurrency: usize::from(args.concurrency),
        per_registry: usize::from(args.concurrency),
        ..BinaryReadingOptions::default()
    })
}

/// What the audit read from a live cluster besides its workloads.
struct ClusterNodes {
    /// Nodes per architecture.
    architectures: BTreeMap<String, usize>,
    /// What a silent amd64 node was read to run.
    unknown_node_level: UnknownNodeLevel,
}

/// The workloads to audit, the pods running now, and the cluster's nodes (live mode).
async fn workloads(
    args: &AuditArgs,
    kube: Option<&kube::Client>,
) -> anyhow::Result<(Manifests, Vec<RunningPod>, Option<ClusterNodes>)> {
    let mut manifests = Manifests::default();
    let mut running = Vec::new();
    let mut nodes = None;
    if let Some(client) = kube {
        let unknown =
            cluster::unknown_node_level(client, args.unknown_node_level.map(Into::into)).await?;
        let cluster: ClusterWorkloads =
            cluster::read(client, args.namespace.as_deref(), unknown).await?;
        manifests = cluster.manifests;
        running = cluster.running;
        nodes = Some(ClusterNodes {
            architectures: cluster.architectures,
            unknown_node_level: unknown,
        });
    }
    let default_namespace = args.namespace.as_deref().unwrap_or("default");
    if args.demo {
        manifests
            .add_text(demo::MANIFESTS, default_namespace)
            .context("the demo's manifests")?;
    }
    for path in &args.filenames {
        input::read_input(path, default_namespace, &mut manifests)?;
    }
    if args.routed_only
        && let Some(client) = kube
    {
        let routing = cluster::routing(client, &args.multiarch_namespace).await?;
        manifests.workloads.retain(|w| routing.routes(w));
    }
    Ok((manifests, running, nodes))
}

/// `--arch`, else the cluster's architectures, else every architecture.
fn targets(
    args: &AuditArgs,
    nodes: Option<&BTreeMap<String, usize>>,
) -> anyhow::Result<Vec<String>> {
    if let Some(arch) = &args.arch {
        return Ok(arch.clone());
    }
    match nodes {
        Some(nodes) if nodes.is_empty() => bail!(
            "the cluster has no node labelled kubernetes.io/arch: name the architectures with --arch"
        ),
        Some(nodes) => Ok(nodes.keys().cloned().collect()),
        // Without a cluster, `--arch` defaults to every architecture.
        None => Ok(Architecture::NAMES.map(String::from).to_vec()),
    }
}

pub async fn run(args: &AuditArgs) -> anyhow::Result<()> {
    if args.bundle.is_some() || args.bundle_image.is_some() {
        return bundle::run(args).await;
    }
    if args.cluster && args.registry.authfile.is_some() {
        bail!(
            "--authfile with --cluster: the cluster's workloads are inspected with their own pull secrets"
        );
    }
    let kube = if args.cluster {
        Some(client::connect(args.kubeconfig.as_deref()).await?)
    } else {
        None
    };
    let (manifests, running, nodes) = workloads(args, kube.as_ref()).await?;
    let targets = targets(args, nodes.as_ref().map(|n| &n.architectures))?;
    let with_credentials = kube.is_some();
    let queries: BTreeSet<ImageQuery> = manifests
        .workloads
        .iter()
        .flat_map(|w| w.queries(with_credentials))
        .chain(running.iter().flat_map(|p| p.queries.iter().cloned()))
        .collect();
    let inspected = resolve(args, queries, kube.as_ref()).await?;
    let lookup = |q: &ImageQuery| -> Resolved {
        inspected
            .resolved
            .get(q)
            .cloned()
            .unwrap_or_else(|| Err("not resolved".into()))
    };
    let audits = audit_workloads(
        &manifests.workloads,
        &manifests.pod_placement_configs,
        &running,
        &targets,
        with_credentials,
        &lookup,
    );
    let mut report = AuditReport::new(targets, audits, manifests.ignored)
        .with_mislabelled_builds(inspected.mislabelled.into_iter().collect());
    if let Some(nodes) = nodes {
        report = report
            .with_cluster_nodes(nodes.architectures)
            .with_unknown_node_level(nodes.unknown_node_level);
    }
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
