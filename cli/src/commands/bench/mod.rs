//! `multiarch bench`: a scheduler measured end to end against an API server, in the
//! manner of kube-scheduler's scheduler_perf: fake Nodes, pods (pre-created before the
//! scheduler starts, or created live), bindings observed through a watch, and the same
//! with a client that only binds, as the yardstick of what the API server allows.
//! Everything created is labelled with the run and deleted at the end.

mod apiserver_metrics;
mod bind_only;
mod namespace;
mod objects;
mod placement_watch;
mod process_stats;
mod report;

use std::{
    collections::HashMap,
    os::fd::AsFd,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use futures_util::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};
use multiarch_crd::ClusterPodPlacementConfig;
use multiarch_runtime::{client, rate_limit::TokenBucket};
use multiarch_scheduler::{engine::image_source::CatalogImages, simulate::scenario::Scenario};
use serde_json::Value;

use self::{
    apiserver_metrics::RequestCounts,
    bind_only::BIND_ONLY_SCHEDULER,
    objects::RUN_LABEL,
    placement_watch::PlacementWatch,
    report::{BenchReport, PlacerRun, PodTimes, Throughput},
};
use crate::args::{BenchArgs, OutputFormat};

/// Objects created (or deleted) at once.
const WRITES_IN_FLIGHT: usize = 32;

struct Bench<'a> {
    args: &'a BenchArgs,
    client: kube::Client,
    limiter: Arc<TokenBucket>,
    run: String,
    images: Vec<String>,
    catalog: CatalogImages,
    nodes: Vec<String>,
}

/// Creates `objects` through `api`, `WRITES_IN_FLIGHT` at a time; each one's
/// (name, uid, created at).
async fn create_all<K>(
    api: &Api<K>,
    limiter: &TokenBucket,
    objects: Vec<Value>,
) -> anyhow::Result<Vec<(String, String, Instant)>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    stream::iter(objects)
        .map(|object| async move {
            let object: K = serde_json::from_value(object)?;
            limiter.acquire().await;
            let created = api
                .create(&PostParams::default(), &object)
                .await
                .context("create")?;
            let meta = created.meta();
            Ok::<_, anyhow::Error>((
                meta.name.clone().unwrap_or_default(),
                meta.uid.clone().unwrap_or_default(),
                Instant::now(),
            ))
        })
        .buffer_unordered(WRITES_IN_FLIGHT)
        .try_collect()
        .await
}

/// `apiserver_request_total` now, or why it cannot be read.
async fn request_counts(client: &kube::Client) -> Result<RequestCounts, String> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client
        .request_text(request)
        .await
        .map(|text| apiserver_metrics::parse(&text))
        .map_err(|e| format!("GET /metrics: {e}"))
}

/// The API server's requests per pod between `before` and `after`, the bench's own taken
/// out (or why they are unavailable).
fn per_pod(
    before: Result<RequestCounts, String>,
    after: Result<RequestCounts, String>,
    own: &RequestCounts,
    pods: usize,
) -> (Option<RequestCounts>, Option<String>) {
    match (before, after) {
        (Ok(before), Ok(after)) => {
            let pods = pods.max(1) as f64;
            let per_pod = apiserver_metrics::delta(&before, &after, own)
                .into_iter()
                .map(|(k, v)| (k, v / pods))
                .collect();
            (Some(per_pod), None)
        }
        (Err(e), _) | (_, Err(e)) => (None, Some(e)),
    }
}

/// The request counts once the placer has finished writing what follows its bindings
/// (a scheduler's events trail them): unchanged, leases aside, for a second; at most 30 s.
async fn settled_counts(client: &kube::Client, deadline: Instant) -> Result<RequestCounts, String> {
    let give_up = (Instant::now() + Duration::from_secs(30)).min(deadline.max(Instant::now()));
    let without_leases = |counts: &RequestCounts| -> RequestCounts {
        counts
            .iter()
            .filter(|(k, _)| !k.ends_with(" leases"))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    let mut last = request_counts(client).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = request_counts(client).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let later = request_counts(client).await?;
        let quiet = without_leases(&now) == without_leases(&last)
            && without_leases(&later) == without_leases(&now);
        if quiet || Instant::now() >= give_up {
            return Ok(later);
        }
        last = later;
    }
}

impl Bench<'_> {
    fn selector(&self) -> String {
        format!("{RUN_LABEL}={}", self.run)
    }

    /// The warm-up pod's run label: apart from the run's pods, so no count includes it.
    fn warm_up_run(&self) -> String {
        format!("{}-warm-up", self.run)
    }

    /// Pods are created while the scheduler runs: it was running already (no command),
    /// or a creation rate was asked for.
    fn creates_live(&self) -> bool {
        self.args.command.is_empty() || self.args.create_rate.is_some()
    }

    /// Waits until the scheduler just started has placed a pod of its own (its start-up
    /// lists are in), then deletes that pod: the run's pods, created after, are timed
    /// from when a ready scheduler could see them.
    async fn warm_up(
        &self,
        scheduler: &str,
        started: &mut tokio::process::Child,
    ) -> anyhow::Result<()> {
        let run = self.warm_up_run();
        let selector = format!("{RUN_LABEL}={run}");
        let watch =
            PlacementWatch::start(self.client.clone(), &self.args.namespace, &selector).await?;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.args.namespace);
        let mut pod = objects::pod(&run, &self.args.namespace, scheduler, 0, &self.images);
        pod["metadata"]["name"] = "bench-warm-up".into();
        create_all(&api, &self.limiter, vec![pod])
            .await
            .context("cannot create the warm-up pod")?;
        let deadline = Instant::now() + self.args.timeout;
        let (bound, exited) = tokio::select! {
            bound = watch.wait(1, deadline) => (bound, None),
            status = started.wait() => (Default::default(), Some(status)),
        };
        delete_labelled(&api, &self.limiter, &selector).await?;
        if let Some(status) = exited {
            let status = status.context("cannot wait for the scheduler")?;
            bail!("the scheduler exited before placing the warm-up pod ({status})");
        }
        if bound.is_empty() {
            bail!(
                "the scheduler placed no warm-up pod within {}: is it running, and does it \
                 place pods of schedulerName {scheduler}?",
                humantime::format_duration(self.args.timeout)
            );
        }
        Ok(())
    }

    async fn create_nodes(&mut self) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client.clone());
        let count = self.args.nodes;
        let objects = (0..count)
            .map(|i| objects::node(&self.run, i, count))
            .collect();
        let created = create_all(&api, &self.limiter, objects)
            .await
            .context("cannot create the fake nodes")?;
        self.nodes = created.into_iter().map(|(name, _, _)| name).collect();
        self.nodes.sort();
        Ok(())
    }

    async fn create_pods(
        &self,
        scheduler: &str,
        rate: Option<f64>,
    ) -> anyhow::Result<Vec<(String, String, Instant)>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.args.namespace);
        let objects: Vec<Value> = (0..self.args.pods)
            .map(|i| objects::pod(&self.run, &self.args.namespace, scheduler, i, &self.images))
            .collect();
        match rate.filter(|r| *r > 0.0) {
            None => create_all(&api, &self.limiter, objects).await,
            Some(rate) => {
                // Paced, not one at a time: a creation slower than 1/rate must not hold
                // the next one back.
                let paced = TokenBucket::new(rate, 1);
                let paced = &paced;
                let api = &api;
                stream::iter(objects)
                    .map(|object| async move {
                        paced.acquire().await;
                        create_all(api, &self.limiter, vec![object]).await
                    })
                    .buffer_unordered(WRITES_IN_FLIGHT)
                    .try_concat()
                    .await
            }
        }
        .context("cannot create the pods")
    }

    /// Pods whose images have no build for their node's architecture.
    fn incompatible(&self, bindings: &placement_watch::Bindings) -> usize {
        bindings
            .iter()
            .filter(|(pod, (_, node))| {
                let index: Option<usize> =
                    pod.strip_prefix("bench-pod-").and_then(|i| i.parse().ok());
                let node_index: Option<usize> = node
                    .strip_prefix("bench-node-")
                    .and_then(|i| i.parse().ok());
                let (Some(index), Some(node_index)) = (index, node_index) else {
                    return true;
                };
                let arch = objects::node_arch(node_index, self.args.nodes);
                let image = &self.images[index % self.images.len()];
                !self.catalog.images.get(image).is_some_and(|platforms| {
                    platforms
                        .iter()
                        .any(|p| p.os == "linux" && p.architecture == arch)
                })
            })
            .count()
    }

    /// One placer's run on fresh pods: the scheduler (started by `command`, or running
    /// already) or the bind-only baseline.
    async fn run_placer(&self, bind_only: bool) -> anyhow::Result<PlacerRun> {
        let scheduler = if bind_only {
            BIND_ONLY_SCHEDULER
        } else {
            self.args.scheduler_name.as_str()
        };
        let live = !bind_only && self.creates_live();
        let watch =
            PlacementWatch::start(self.client.clone(), &self.args.namespace, &self.selector())
                .await?;
        let mut own = RequestCounts::new();
        let mut child = None;
        let mut pid = self.args.scheduler_pid;
        // Pods created live meet a scheduler that is ready: one started here has placed a
        // pod of its own before the first is created. Pre-created pods are there before
        // it starts.
        let start_scheduler = |child: &mut Option<tokio::process::Child>,
                               pid: &mut Option<u32>|
         -> anyhow::Result<bool> {
            let Some(started) = self.start_command()? else {
                return Ok(false);
            };
            *pid = started.id();
            *child = Some(started);
            Ok(true)
        };
        let (created, start, before) = if live {
            if start_scheduler(&mut child, &mut pid)?
                && let Some(started) = child.as_mut()
            {
                self.warm_up(scheduler, started).await?;
            }
            let before = request_counts(&self.client).await;
            let start = Instant::now();
            let created = self
                .create_pods(scheduler, self.args.create_rate.or(Some(0.0)))
                .await?;
            own.insert("POST pods".into(), created.len() as f64);
            (created, start, before)
        } else {
            let created = self.create_pods(scheduler, None).await?;
            (created, Instant::now(), request_counts(&self.client).await)
        };
        let deadline = start + self.args.timeout;
        let mut failed_bindings = 0;
        if bind_only {
            let pods = created
                .iter()
                .map(|(n, u, _)| (n.clone(), u.clone()))
                .collect();
            failed_bindings = bind_only::bind_all(
                self.client.clone(),
                &self.args.namespace,
                pods,
                &self.nodes,
                self.limiter.clone(),
                self.args.bind_concurrency,
            )
            .await;
        } else if !live {
            start_scheduler(&mut child, &mut pid)?;
        }
        let bindings = watch.wait(created.len(), deadline).await;
        let after = settled_counts(&self.client, deadline).await;
        let process = pid.and_then(process_stats::read);
        if let Some(mut child) = child {
            stop(&mut child).await;
        }
        let by_name: HashMap<&str, Instant> =
            created.iter().map(|(n, _, at)| (n.as_str(), *at)).collect();
        let times: Vec<PodTimes> = by_name
            .iter()
            .map(|(name, created_at)| {
                let schedulable = if live { *created_at } else { start };
                PodTimes {
                    schedulable: schedulable.saturating_duration_since(start).as_secs_f64(),
                    bound: bindings
                        .get(*name)
                        .map(|(at, _)| at.saturating_duration_since(start).as_secs_f64()),
                }
            })
            .collect();
        let (requests_per_pod, requests_unavailable) = per_pod(before, after, &own, created.len());
        if failed_bindings > 0 {
            tracing::warn!(failed_bindings, "bind-only: some bindings were refused");
        }
        let run = PlacerRun {
            placer: if bind_only { "bind-only" } else { "scheduler" }.into(),
            throughput: Throughput::of(&times),
            incompatible: self.incompatible(&bindings),
            created_per_second: live.then(|| creation_rate(&created)).flatten(),
            requests_per_pod,
            requests_unavailable,
            process,
        };
        self.delete_pods().await?;
        Ok(run)
    }

    /// Starts the scheduler `command` names, if it names one.
    fn start_command(&self) -> anyhow::Result<Option<tokio::process::Child>> {
        let Some((program, rest)) = self.args.command.split_first() else {
            return Ok(None);
        };
        // Its output goes to standard error: standard output is the report.
        let stderr = std::io::stderr()
            .as_fd()
            .try_clone_to_owned()
            .context("cannot pass standard error on")?;
        let spawned = tokio::process::Command::new(program)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        Ok(Some(spawned))
    }

    async fn delete_pods(&self) -> anyhow::Result<()> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.args.namespace);
        delete_labelled(&api, &self.limiter, &self.selector()).await
    }

    async fn cleanup(&self, namespace_created: bool) -> anyhow::Result<()> {
        self.delete_pods().await?;
        // Left only when the run was interrupted during the warm-up.
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.args.namespace);
        let warm_up = format!("{RUN_LABEL}={}", self.warm_up_run());
        delete_labelled(&pods, &self.limiter, &warm_up).await?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        delete_labelled(&nodes, &self.limiter, &self.selector()).await?;
        if namespace_created {
            namespace::delete(&self.client, &self.limiter, &self.args.namespace).await?;
        }
        Ok(())
    }
}

/// Deletes every object `selector` matches (an empty one: every object), at once (no
/// grace period).
pub(super) async fn delete_labelled<K>(
    api: &Api<K>,
    limiter: &TokenBucket,
    selector: &str,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let listed = api
        .list_metadata(&ListParams::default().labels(selector))
        .await
        .context("cannot list what the run created")?;
    let names: Vec<String> = listed
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    stream::iter(names)
        .map(|name| async move {
            limiter.acquire().await;
            match api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                Err(e) => Err(e).with_context(|| format!("cannot delete {name}")),
            }
        })
        .buffer_unordered(WRITES_IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Pods created per second between the first creation and the last (none for fewer than
/// two).
fn creation_rate(created: &[(String, String, Instant)]) -> Option<f64> {
    let first = created.iter().map(|(_, _, at)| *at).min()?;
    let last = created.iter().map(|(_, _, at)| *at).max()?;
    let span = last.saturating_duration_since(first).as_secs_f64();
    (span > 0.0).then(|| (created.len() - 1) as f64 / span)
}

/// SIGTERM (the scheduler drains and exits), then SIGKILL after 10 s.
async fn stop(child: &mut tokio::process::Child) {
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(rustix::process::Pid::from_raw);
    if let Some(pid) = pid
        && let Err(e) = rustix::process::kill_process(pid, rustix::process::Signal::TERM)
    {
        tracing::warn!(error = %e, "cannot send SIGTERM to the scheduler");
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

/// `multiarch scheduler` waits up to 30 s for a ClusterPodPlacementConfig list before
/// scheduling with defaults: without the CRD, that wait is most of a short run's time.
async fn warn_without_placement_crd(client: &kube::Client) {
    let configs: Api<ClusterPodPlacementConfig> = Api::all(client.clone());
    match configs.list(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(s)) if s.code == 404 => tracing::warn!(
            "the ClusterPodPlacementConfig CRD is not installed: multiarch scheduler waits \
             30 s for it before scheduling with defaults, and that wait counts in pods/s \
             (install it: kubectl apply -k manifests/crds)"
        ),
        _ => {}
    }
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<()> {
    // Warnings (refused bindings, a failed watch, a missing CRD) on standard error;
    // standard output is the report.
    let _ = multiarch_runtime::logging::init(multiarch_runtime::logging::LogFormat::Text, "warn");
    if args.nodes == 0 || args.pods == 0 {
        bail!("--nodes and --pods must be at least 1");
    }
    let text = std::fs::read_to_string(&args.platforms)
        .with_context(|| format!("cannot read {}", args.platforms.display()))?;
    let catalog = Scenario::from_yaml(&text)
        .and_then(|s| s.image_catalog())
        .with_context(|| args.platforms.display().to_string())?;
    let mut images: Vec<String> = catalog.images.keys().cloned().collect();
    images.sort();
    if images.is_empty() {
        bail!("{} names no image", args.platforms.display());
    }
    let client = client::connect(args.kubeconfig.as_deref()).await?;
    let run_id = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    );
    let mut bench = Bench {
        args,
        client: client.clone(),
        limiter: Arc::new(TokenBucket::new(args.qps, args.burst)),
        run: run_id,
        images,
        catalog,
        nodes: Vec::new(),
    };
    if !args.command.is_empty() {
        warn_without_placement_crd(&client).await;
    }
    let namespace_created = namespace::create(&client, &args.namespace).await?;
    let work = async {
        bench.create_nodes().await?;
        let mut runs = Vec::new();
        if !args.bind_only {
            runs.push(bench.run_placer(false).await?);
        }
        if args.bind_only || args.compare_bind_only {
            runs.push(bench.run_placer(true).await?);
        }
        Ok::<_, anyhow::Error>(runs)
    };
    // Interrupted (Ctrl-C, SIGTERM): the started scheduler is killed as the run is
    // dropped, and what was created is still removed.
    let outcome = tokio::select! {
        outcome = work => outcome,
        () = multiarch_runtime::shutdown::signalled() => Err(anyhow::anyhow!("interrupted")),
    };
    // Cleaned up whatever happened.
    let cleaned = bench.cleanup(namespace_created).await;
    let runs = outcome?;
    cleaned?;
    let report = BenchReport::new(
        args.nodes,
        args.pods,
        (args.command.is_empty() || args.create_rate.is_some())
            .then_some(args.create_rate.unwrap_or(0.0))
            .filter(|_| !args.bind_only),
        runs,
    );
    match args.output {
        OutputFormat::Text => print!("{}", report.table()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    let unbound: usize = report
        .runs
        .iter()
        .map(|r| r.throughput.pods - r.throughput.bound)
        .sum();
    if unbound > 0 {
        bail!(
            "{unbound} pod(s) were not bound within {}",
            humantime::format_duration(args.timeout)
        );
    }
    Ok(())
}
