//! Reading images' binaries for placement (the `binaryInspection` plugin), never in the
//! way of an answer: an inspection is answered at once with what is known of its builds'
//! binaries, and the builds not read yet are read in the background, so a pod whose image
//! is not read yet is placed by its platforms, and the next inspection of the image (the
//! scheduler asks again soon while `binariesPending` says so) carries the levels read and
//! leaves out the builds whose program is of another architecture.
//!
//! Kept by platform manifest digest (immutable: what a digest runs never changes), so a
//! few hundred bytes per build, at most `capacity` of them. Bounded in work: `concurrency`
//! reads at once, at most `per_registry` of them from one registry (a slow or hostile
//! registry delays only its own images' reads) and `max_waiting` started or waiting; each
//! read within `BinaryLimits`. A failed read is retried after `failure_ttl`. A read's
//! facts about a digest are served only with an answer that names the digest, obtained
//! with the asker's own credentials: a tenant learns nothing of an image it cannot read.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    num::NonZeroUsize,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use lru::LruCache;
use tokio::sync::Semaphore;

use crate::{
    binary_reading::{BinaryFacts, BinaryLimits},
    error::InspectError,
    image::{BinarySummary, ImageInfo, PlatformEntry},
    metrics::InspectorMetrics,
};

#[derive(Clone, Copy, Debug)]
pub struct BinaryReadingOptions {
    /// Reads under way at once, across registries.
    pub concurrency: usize,
    /// Reads under way at once from one registry.
    pub per_registry: usize,
    /// Reads started (under way or waiting for their turn); builds beyond are read when
    /// one ends and the image is asked for again.
    pub max_waiting: usize,
    /// Builds whose facts are kept (least recently used forgotten first).
    pub capacity: usize,
    /// How long a failed read is remembered before the build is read again.
    pub failure_ttl: Duration,
    pub limits: BinaryLimits,
}

impl Default for BinaryReadingOptions {
    fn default() -> Self {
        BinaryReadingOptions {
            concurrency: 4,
            per_registry: 2,
            max_waiting: 256,
            capacity: 10_000,
            failure_ttl: Duration::from_secs(600),
            limits: BinaryLimits::default(),
        }
    }
}

#[derive(Clone, Debug)]
enum Outcome {
    Read(BinarySummary),
    /// Not read; read again after this.
    Failed {
        retry_at: Instant,
    },
}

struct State {
    outcomes: LruCache<String, Outcome>,
    /// Platform manifest digests being read, and the registry each is read from.
    under_way: HashMap<String, String>,
}

impl State {
    fn reads_from(&self, registry: &str) -> usize {
        self.under_way.values().filter(|r| *r == registry).count()
    }
}

/// The facts read so far and the reads under way.
pub struct BinaryReads {
    options: BinaryReadingOptions,
    state: Arc<Mutex<State>>,
    permits: Arc<Semaphore>,
    metrics: InspectorMetrics,
}

impl BinaryReads {
    pub fn new(options: BinaryReadingOptions, metrics: InspectorMetrics) -> Self {
        let capacity = NonZeroUsize::new(options.capacity.max(1)).unwrap_or(NonZeroUsize::MIN);
        BinaryReads {
            options,
            state: Arc::new(Mutex::new(State {
                outcomes: LruCache::new(capacity),
                under_way: HashMap::new(),
            })),
            permits: Arc::new(Semaphore::new(options.concurrency.max(1))),
            metrics,
        }
    }

    pub fn limits(&self) -> BinaryLimits {
        self.options.limits
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `info` with the facts known of its Linux builds' binaries, `binariesPending` set
    /// while some are still to be read; the builds neither read nor under way are started
    /// with `read` (which reads one build, by its manifest digest), as far as the bounds
    /// allow. Returns `info` itself when nothing is added.
    pub fn annotate<F, Fut>(&self, info: &Arc<ImageInfo>, registry: &str, read: F) -> Arc<ImageInfo>
    where
        F: Fn(&PlatformEntry) -> Fut,
        Fut: Future<Output = Result<BinaryFacts, InspectError>> + Send + 'static,
    {
        if info.operator_bundle {
            return info.clone();
        }
        let mut annotated = (**info).clone();
        let mut changed = false;
        let mut to_start = Vec::new();
        {
            let mut state = self.lock();
            let now = Instant::now();
            let mut seen = HashSet::new();
            for entry in annotated.platforms.iter_mut() {
                if entry.os != "linux" || !seen.insert(entry.digest.clone()) {
                    // Only Linux builds are ELF programs; a digest is read once.
                    if let Some(Outcome::Read(summary)) = state.outcomes.peek(&entry.digest) {
                        entry.binary = Some(summary.clone());
                        changed = true;
                    }
                    continue;
                }
                match state.outcomes.get(&entry.digest) {
                    Some(Outcome::Read(summary)) => {
                        entry.binary = Some(summary.clone());
                        changed = true;
                        continue;
                    }
                    Some(Outcome::Failed { retry_at }) if *retry_at > now => continue,
                    Some(Outcome::Failed { .. }) | None => {}
                }
                annotated.binaries_pending = true;
                changed = true;
                let startable = !state.under_way.contains_key(&entry.digest)
                    && state.under_way.len() < self.options.max_waiting
                    && state.reads_from(registry) < self.options.per_registry;
                if startable {
                    state
                        .under_way
                        .insert(entry.digest.clone(), registry.to_owned());
                    to_start.push(entry.clone());
                }
            }
            self.metrics
                .binary_reads_under_way
                .set(i64::try_from(state.under_way.len()).unwrap_or(i64::MAX));
        }
        for entry in to_start {
            let future = read(&entry);
            self.start(&info.image, entry, future);
        }
        if changed {
            Arc::new(annotated)
        } else {
            info.clone()
        }
    }

    /// Reads one build in a task of its own; whatever ends it (done, failed, panicked,
    /// cancelled at shutdown), the build leaves `under_way` and is read again later if
    /// it was not read.
    fn start<Fut>(&self, image: &str, entry: PlatformEntry, read: Fut)
    where
        Fut: Future<Output = Result<BinaryFacts, InspectError>> + Send + 'static,
    {
        let mut landing = Landing {
            state: self.state.clone(),
            metrics: self.metrics.clone(),
            failure_ttl: self.options.failure_ttl,
            image: image.to_owned(),
            entry: Some(entry),
        };
        let permits = self.permits.clone();
        tokio::spawn(async move {
            let Ok(_permit) = permits.acquire_owned().await else {
                return;
            };
            landing.land(read.await);
        });
    }
}

/// Records a read's end, and the failure of one that never ended (see [`Drop`]).
struct Landing {
    state: Arc<Mutex<State>>,
    metrics: InspectorMetrics,
    failure_ttl: Duration,
    image: String,
    entry: Option<PlatformEntry>,
}

impl Landing {
    fn land(&mut self, result: Result<BinaryFacts, InspectError>) {
        let Some(entry) = self.entry.take() else {
            return;
        };
        let outcome = match result {
            Ok(facts) => {
                let summary = summary_of(&facts);
                self.metrics.binary_read_bytes.inc_by(facts.fetched_bytes);
                if summary.architecture != entry.architecture {
                    self.metrics.count_binary_read("mislabelled");
                    tracing::warn!(
                        image = %self.image,
                        build = %entry.platform(),
                        digest = %entry.digest,
                        program = %summary.path,
                        real = %summary.architecture,
                        "the build's program is of another architecture than its index entry says: not counted as runnable"
                    );
                } else {
                    self.metrics.count_binary_read("ok");
                    tracing::info!(
                        image = %self.image,
                        build = %entry.platform(),
                        digest = %entry.digest,
                        program = %summary.path,
                        x86_64_level = ?summary.x86_64_level,
                        fetched_bytes = facts.fetched_bytes,
                        "read the build's binaries"
                    );
                }
                Outcome::Read(summary)
            }
            Err(error) => {
                self.metrics.count_binary_read(error.metric_label());
                tracing::warn!(
                    image = %self.image,
                    build = %entry.platform(),
                    digest = %entry.digest,
                    error = %error,
                    retry_in = ?self.failure_ttl,
                    "cannot read the build's binaries: placed by its platform alone"
                );
                Outcome::Failed {
                    retry_at: Instant::now() + self.failure_ttl,
                }
            }
        };
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.under_way.remove(&entry.digest);
        state.outcomes.put(entry.digest, outcome);
        self.metrics
            .binary_reads_under_way
            .set(i64::try_from(state.under_way.len()).unwrap_or(i64::MAX));
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if self.entry.is_some() {
            self.land(Err(InspectError::Service(
                "the binary read ended without an answer".into(),
            )));
        }
    }
}

/// What placement keeps of a read: the program's path and architecture, and the level the
/// program and its loader need.
fn summary_of(facts: &BinaryFacts) -> BinarySummary {
    BinarySummary::new(
        &facts.program.path,
        &facts.program.architecture,
        facts.x86_64_level(),
    )
}

#[cfg(test)]
mod tests;
