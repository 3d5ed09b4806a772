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
use multiarch_inspector::{ImageInspector, InspectRequest};
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

/// Through `inspector`, `concurrency` at a time.
pub async fn inspect(
    queries: BTreeSet<ImageQuery>,
    inspector: Arc<dyn ImageInspector>,
    concurrency: usize,
) -> BTreeMap<ImageQuery, Resolved> {
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
                let found = inspector
                    .inspect(&request)
                    .await
                    .map(|info| info.platform_list())
                    .map_err(|e| e.to_string());
                bar.set_message(query.image.clone());
                bar.inc(1);
                (query, found)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    bar.finish_and_clear();
    answers
}
