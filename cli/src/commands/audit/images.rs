//! Resolving the audit's images: offline from a platforms file, or through the inspector
//! (its cache makes one registry request per image and credentials, however many
//! workloads share it), `--concurrency` at a time, with a progress bar on a terminal.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use futures_util::{StreamExt, stream};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use multiarch_audit::{assemble::Resolved, workloads::ImageQuery};
use multiarch_inspector::{ImageInfo, ImageInspector, InspectError, InspectRequest};
use multiarch_policy::platform::Platform;

/// From a platforms file: an image it does not name is unknown, with that reason.
pub fn offline(
    queries: BTreeSet<ImageQuery>,
    known: &BTreeMap<String, Vec<Platform>>,
    source: &str,
) -> BTreeMap<ImageQuery, Resolved> {
    queries
        .into_iter()
        .map(|q| {
            let found = known
                .get(&q.image)
                .cloned()
                .ok_or_else(|| format!("not in {source}"));
            (q, found)
        })
        .collect()
}

/// The bar, drawn on standard error only when it is a terminal (hidden otherwise, so
/// that logs and CI output stay clean).
fn progress(len: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        Some(u64::try_from(len).unwrap_or(u64::MAX)),
        ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        ProgressStyle::with_template("inspecting images {bar:30} {pos}/{len} {elapsed} {wide_msg}")
    {
        bar.set_style(style);
    }
    // Drawn at once and then kept moving: a slow registry should not look like a hang.
    bar.tick();
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

/// What the registries answered: each query's platforms, and the builds left out as
/// mislabelled (with `--binaries`).
#[derive(Default)]
pub struct Inspected {
    pub resolved: BTreeMap<ImageQuery, Resolved>,
    pub mislabelled: BTreeSet<String>,
}

/// How long an image's binaries may take to be read: the read's own deadline, and then
/// some (a read that ends in failure is answered without them).
const BINARIES_WAIT: Duration = Duration::from_secs(15 * 60);

/// Asks until the builds' binaries are read (`binaries`), or once.
pub(super) async fn inspect_one(
    inspector: &dyn ImageInspector,
    request: &InspectRequest,
    binaries: bool,
) -> Result<Arc<ImageInfo>, InspectError> {
    let deadline = tokio::time::Instant::now() + BINARIES_WAIT;
    loop {
        let info = inspector.inspect(request).await?;
        if !binaries || !info.binaries_pending || tokio::time::Instant::now() >= deadline {
            return Ok(info);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Through `inspector`, `concurrency` at a time; with `binaries`, the builds' binaries
/// read (the inspector reads them) and judged by.
pub async fn inspect(
    queries: BTreeSet<ImageQuery>,
    inspector: Arc<dyn ImageInspector>,
    concurrency: usize,
    binaries: bool,
) -> Inspected {
    let bar = progress(queries.len());
    let answers = stream::iter(queries)
        .map(|query| {
            let inspector = inspector.clone();
            let bar = bar.clone();
            async move {
                let request = InspectRequest {
                    image: query.image.clone(),
                    namespace: query.namespace.clone(),
                    pull_secrets: query.pull_secrets.clone(),
                    service_account: query.service_account.clone(),
                    bypass_cache: false,
                };
                let answer = inspect_one(inspector.as_ref(), &request, binaries).await;
                bar.set_message(query.image.clone());
                bar.inc(1);
                (query, answer)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await;
    bar.finish_and_clear();
    let mut inspected = Inspected::default();
    for (query, answer) in answers {
        let found = match answer {
            Ok(info) if binaries => {
                inspected.mislabelled.extend(info.mislabelled_builds());
                Ok(info.runnable_platforms())
            }
            Ok(info) => Ok(info.platform_list()),
            Err(e) => Err(e.to_string()),
        };
        inspected.resolved.insert(query, found);
    }
    inspected
}
