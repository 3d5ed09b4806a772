//! The scheduling queue: active (priority, then age), backoff, unschedulable (waiting for
//! a cluster event that may help, as the rejecting plugins' queueing hints judge it),
//! waiting-for-images (inspection in progress, never blocking the cycle) and
//! waiting-for-preemption (its victims are being evicted). kube-scheduler's
//! `PriorityQueue`, reduced to what we need.

use std::{
    cmp::{Ordering, Reverse},
    collections::BinaryHeap,
    sync::Arc,
    time::{Duration, Instant},
};

use multiarch_plugins::{
    events::{ClusterChange, EventKind, QueueingHint},
    model::{cluster::ClusterState, pod::PodInfo, spare_room},
    profile::Profile,
};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use multiarch_runtime::backoff::Backoff;

/// How long a pod may wait in unschedulable before it is retried anyway.
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Where {
    Active,
    Backoff,
    Unschedulable,
    WaitingForImages,
    WaitingForPreemption,
    InFlight,
}

#[derive(Clone, Debug)]
struct Entry {
    pod: Arc<PodInfo>,
    place: Where,
    /// Bumped whenever the pod moves, so stale heap entries are skipped.
    seq: u64,
    /// When the pod entered the queue; ties in priority go to the oldest.
    added: Instant,
    attempts: u32,
    backoff_until: Instant,
    unschedulable_since: Instant,
    /// Plugins that rejected the pod in its last attempt.
    rejectors: Vec<&'static str>,
    /// The kinds of change those plugins registered (empty with no rejectors: any
    /// change retries the pod).
    kinds: Vec<EventKind>,
    /// Scheduling cycle the pod was popped in.
    cycle: u64,
    /// Images still being inspected.
    waiting_images: Vec<String>,
}

/// A pod handed to a scheduling cycle.
#[derive(Clone, Debug)]
pub struct PoppedPod {
    pub pod: Arc<PodInfo>,
    pub attempts: u32,
    pub cycle: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub active: usize,
    pub backoff: usize,
    pub unschedulable: usize,
    pub waiting_for_images: usize,
    pub waiting_for_preemption: usize,
}

#[derive(PartialEq, Eq)]
struct ActiveKey {
    priority: i32,
    added: Reverse<Instant>,
    seq: Reverse<u64>,
    uid: String,
}

impl Ord for ActiveKey {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.priority, self.added, self.seq).cmp(&(other.priority, other.added, other.seq))
    }
}

impl PartialOrd for ActiveKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Default)]
pub struct SchedulingQueue {
    /// Boxed: a hash table keeps up to twice the slots it holds entries (and, once a
    /// backlog drains, more until it shrinks); a slot of a pointer costs 8 bytes, not
    /// the entry's 150 (at 130,000 pending pods the table was 46 MB).
    entries: HashMap<String, Box<Entry>>,
    /// Indexes of the pods in unschedulable and waiting-for-images, so that cluster events
    /// (one per binding) cost nothing for the pods that are elsewhere.
    unschedulable_set: HashSet<String>,
    waiting_set: HashSet<String>,
    /// Unschedulable pods per kind of change their rejectors registered, and those
    /// without rejectors: an event looks only at the pods it may concern.
    waiting_on: Vec<HashSet<String>>,
    waiting_on_any: HashSet<String>,
    /// Queueing hint results per event kind: `[Queue, QueueSkip]`.
    hint_counts: Vec<[u64; 2]>,
    active: BinaryHeap<ActiveKey>,
    backoff: BinaryHeap<Reverse<(Instant, u64, String)>>,
    backoff_policy: Backoff,
    next_seq: u64,
    scheduling_cycle: u64,
    /// The cycle of the last cluster event that moved pods: a pod that fails in an
    /// earlier-or-equal cycle goes to backoff, not unschedulable, because the event may
    /// already have fixed what it failed on.
    move_request_cycle: u64,
}

impl SchedulingQueue {
    pub fn new(backoff_policy: Backoff) -> Self {
        SchedulingQueue {
            backoff_policy,
            ..SchedulingQueue::default()
        }
    }

    /// How many times a change of `kind` moved (Queue) or left (QueueSkip) an
    /// unschedulable pod, since the start.
    pub fn hint_counts(&self) -> Vec<(EventKind, QueueingHint, u64)> {
        let mut out = Vec::new();
        for kind in EventKind::ALL {
            if let Some([queue, skip]) = self.hint_counts.get(kind.index()) {
                out.push((kind, QueueingHint::Queue, *queue));
                out.push((kind, QueueingHint::QueueSkip, *skip));
            }
        }
        out
    }

    fn count_hint(&mut self, kind: EventKind, hint: QueueingHint, n: u64) {
        if self.hint_counts.len() < EventKind::ALL.len() {
            self.hint_counts.resize(EventKind::ALL.len(), [0, 0]);
        }
        let slot = &mut self.hint_counts[kind.index()];
        match hint {
            QueueingHint::Queue => slot[0] += n,
            QueueingHint::QueueSkip => slot[1] += n,
        }
    }

    /// A change nothing reads (a node heartbeat): every pod that waits on its kind stays.
    pub fn unchanged(&mut self, kind: EventKind) {
        let waiting = self.waiting_on.get(kind.index()).map_or(0, HashSet::len);
        self.count_hint(kind, QueueingHint::QueueSkip, waiting as u64);
    }

    pub fn counts(&self) -> QueueCounts {
        let mut counts = QueueCounts::default();
        for e in self.entries.values() {
            match e.place {
                Where::Active => counts.active += 1,
                Where::Backoff => counts.backoff += 1,
                Where::Unschedulable => counts.unschedulable += 1,
                Where::WaitingForImages => counts.waiting_for_images += 1,
                Where::WaitingForPreemption => counts.waiting_for_preemption += 1,
                Where::InFlight => {}
            }
        }
        counts
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.entries.contains_key(uid)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Pods in the queue that are not being scheduled right now.
    pub fn pending(&self) -> impl Iterator<Item = &Arc<PodInfo>> {
        self.entries.values().map(|e| &e.pod)
    }

    /// A new pending pod, or a new version of one already queued. An update of what
    /// scheduling reads may make an unschedulable pod schedulable (its affinity
    /// changed...), so it is retried; a status-only update (the scheduler's own condition
    /// or nomination) is not.
    pub fn add_or_update(&mut self, pod: Arc<PodInfo>, now: Instant) {
        let uid = pod.uid.clone();
        if let Some(entry) = self.entries.get_mut(&uid) {
            if entry.pod.resource_version == pod.resource_version
                && !pod.resource_version.is_empty()
            {
                return;
            }
            let relevant = !entry.pod.same_scheduling_inputs(&pod);
            entry.pod = pod;
            if !relevant {
                return;
            }
            match entry.place {
                Where::Unschedulable => self.move_out_of_unschedulable(&uid, now),
                Where::Active => self.push_active(&uid),
                Where::Backoff
                | Where::WaitingForImages
                | Where::WaitingForPreemption
                | Where::InFlight => {}
            }
            return;
        }
        self.entries.insert(
            uid.clone(),
            Box::new(Entry {
                pod,
                place: Where::Active,
                seq: 0,
                added: now,
                attempts: 0,
                backoff_until: now,
                unschedulable_since: now,
                rejectors: Vec::new(),
                kinds: Vec::new(),
                cycle: 0,
                waiting_images: Vec::new(),
            }),
        );
        self.push_active(&uid);
    }

    pub fn delete(&mut self, uid: &str) -> bool {
        if self.entries.contains_key(uid) {
            // Leaves every index before it goes.
            self.set_place(uid, Where::InFlight);
        }
        let removed = self.entries.remove(uid).is_some();
        if removed {
            spare_room::shrink_map(&mut self.entries);
        }
        removed
    }

    /// Moves a pod and keeps the indexes right; every change of place goes through here.
    fn set_place(&mut self, uid: &str, place: Where) -> Option<&mut Entry> {
        let entry = self.entries.get_mut(uid)?;
        if self.waiting_on.len() < EventKind::ALL.len() {
            self.waiting_on
                .resize_with(EventKind::ALL.len(), HashSet::default);
        }
        match entry.place {
            Where::Unschedulable => {
                self.unschedulable_set.remove(uid);
                self.waiting_on_any.remove(uid);
                spare_room::shrink_set(&mut self.unschedulable_set);
                spare_room::shrink_set(&mut self.waiting_on_any);
                for kind in &entry.kinds {
                    self.waiting_on[kind.index()].remove(uid);
                    spare_room::shrink_set(&mut self.waiting_on[kind.index()]);
                }
            }
            Where::WaitingForImages => {
                self.waiting_set.remove(uid);
            }
            _ => {}
        }
        match place {
            Where::Unschedulable => {
                self.unschedulable_set.insert(uid.to_owned());
                if entry.rejectors.is_empty() {
                    self.waiting_on_any.insert(uid.to_owned());
                }
                for kind in &entry.kinds {
                    self.waiting_on[kind.index()].insert(uid.to_owned());
                }
            }
            Where::WaitingForImages => {
                self.waiting_set.insert(uid.to_owned());
            }
            _ => {}
        }
        entry.place = place;
        Some(entry)
    }

    /// The next pod to schedule: highest priority, then longest waiting.
    pub fn pop(&mut self) -> Option<PoppedPod> {
        spare_room::shrink_heap(&mut self.active);
        while let Some(key) = self.active.pop() {
            let Some(entry) = self.entries.get_mut(&key.uid) else {
                continue;
            };
            if entry.place != Where::Active || entry.seq != key.seq.0 {
                continue;
            }
            self.scheduling_cycle += 1;
            entry.place = Where::InFlight;
            entry.cycle = self.scheduling_cycle;
            return Some(PoppedPod {
                pod: entry.pod.clone(),
                attempts: entry.attempts,
                cycle: entry.cycle,
            });
        }
        None
    }

    /// The cycle bound the pod: it leaves the queue.
    pub fn done(&mut self, uid: &str) {
        self.delete(uid);
    }

    /// The cycle rejected the pod. `retry_with_backoff` (or a cluster event during the
    /// cycle) sends it to backoff; otherwise it waits in unschedulable for a change of
    /// one of `kinds` (those its `rejectors` registered) that their hints say may help.
    pub fn unschedulable(
        &mut self,
        uid: &str,
        rejectors: Vec<&'static str>,
        kinds: Vec<EventKind>,
        retry_with_backoff: bool,
        now: Instant,
    ) {
        let move_request_cycle = self.move_request_cycle;
        let policy = self.backoff_policy;
        let Some(entry) = self.entries.get_mut(uid) else {
            return;
        };
        if entry.place != Where::InFlight {
            return;
        }
        entry.attempts += 1;
        entry.backoff_until = now + policy.after(entry.attempts);
        entry.rejectors = rejectors;
        entry.kinds = kinds;
        if retry_with_backoff || move_request_cycle >= entry.cycle {
            self.push_backoff(uid);
        } else {
            entry.unschedulable_since = now;
            self.set_place(uid, Where::Unschedulable);
        }
    }

    /// The cycle or the binding failed with an error: always backoff.
    pub fn error(&mut self, uid: &str, now: Instant) {
        let policy = self.backoff_policy;
        let Some(entry) = self.entries.get_mut(uid) else {
            return;
        };
        entry.attempts += 1;
        entry.backoff_until = now + policy.after(entry.attempts);
        entry.rejectors.clear();
        entry.kinds.clear();
        self.push_backoff(uid);
    }

    /// Preemption is evicting victims for the pod: it is not retried until that is done.
    pub fn wait_for_preemption(
        &mut self,
        uid: &str,
        rejectors: Vec<&'static str>,
        kinds: Vec<EventKind>,
    ) {
        if let Some(entry) = self.set_place(uid, Where::WaitingForPreemption) {
            entry.attempts += 1;
            entry.rejectors = rejectors;
            entry.kinds = kinds;
        }
    }

    /// The evictions were sent: the pod is retried now (it fits if its victims are gone
    /// already, and otherwise waits for their deletion).
    pub fn preemption_done(&mut self, uid: &str) {
        if self
            .entries
            .get(uid)
            .is_some_and(|e| e.place == Where::WaitingForPreemption)
        {
            self.push_active(uid);
        }
    }

    /// A pod whose binding failed comes back (it had left the queue).
    pub fn requeue_after_bind_error(&mut self, pod: Arc<PodInfo>, attempts: u32, now: Instant) {
        let uid = pod.uid.clone();
        self.add_or_update(pod, now);
        if let Some(entry) = self.set_place(&uid, Where::InFlight) {
            entry.attempts = attempts;
        }
        self.error(&uid, now);
    }

    /// The pod's images are being inspected; it waits without blocking others.
    pub fn wait_for_images(&mut self, uid: &str, images: Vec<String>) {
        if let Some(entry) = self.set_place(uid, Where::WaitingForImages) {
            entry.waiting_images = images;
        }
    }

    /// Images whose platforms are now known (or whose inspection failed for good): pods
    /// waiting only on them become active. (The caller then sends the change to the
    /// unschedulable pods.)
    pub fn images_resolved(&mut self, resolved: &[String]) {
        let mut ready = Vec::new();
        for uid in &self.waiting_set {
            if let Some(e) = self.entries.get_mut(uid) {
                e.waiting_images.retain(|i| !resolved.contains(i));
                if e.waiting_images.is_empty() {
                    ready.push(uid.clone());
                }
            }
        }
        for uid in ready {
            self.push_active(&uid);
        }
    }

    /// A cluster change: each unschedulable pod that waits on its kind moves to active
    /// (or backoff, if still backing off) when one of the plugins that rejected it says
    /// the change may help (a pod without recorded rejectors always moves).
    pub fn on_event(
        &mut self,
        change: &ClusterChange<'_>,
        now: Instant,
        profile: &Profile,
        cluster: &ClusterState,
    ) {
        self.move_request_cycle = self.scheduling_cycle;
        if self.unschedulable_set.is_empty() {
            return;
        }
        let kind = change.kind();
        let waiting = self.waiting_on.get(kind.index());
        let mut moving: Vec<String> = Vec::new();
        let mut skipped = 0u64;
        for uid in waiting.into_iter().flatten().chain(&self.waiting_on_any) {
            let Some(entry) = self.entries.get(uid) else {
                continue;
            };
            let queue = entry.rejectors.is_empty()
                || entry.rejectors.iter().any(|plugin| {
                    profile.hint(plugin, &entry.pod, change, cluster) == QueueingHint::Queue
                });
            if queue {
                moving.push(uid.clone());
            } else {
                skipped += 1;
            }
        }
        self.count_hint(kind, QueueingHint::Queue, moving.len() as u64);
        self.count_hint(kind, QueueingHint::QueueSkip, skipped);
        for uid in moving {
            self.move_out_of_unschedulable(&uid, now);
        }
    }

    /// Periodic: expired backoffs become active; pods unschedulable for 5 minutes retry.
    pub fn flush(&mut self, now: Instant) {
        while let Some(Reverse((until, seq, uid))) = self.backoff.peek().cloned() {
            if until > now {
                break;
            }
            self.backoff.pop();
            let current = self
                .entries
                .get(&uid)
                .is_some_and(|e| e.place == Where::Backoff && e.seq == seq);
            if current {
                self.push_active(&uid);
            }
        }
        spare_room::shrink_heap(&mut self.backoff);
        let stale: Vec<String> = self
            .unschedulable_set
            .iter()
            .filter_map(|uid| self.entries.get_key_value(uid))
            .filter(|(_, e)| now.duration_since(e.unschedulable_since) >= MAX_IN_UNSCHEDULABLE)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in stale {
            self.move_out_of_unschedulable(&uid, now);
        }
    }

    /// When the next backoff expires, so a caller can sleep until then.
    pub fn next_backoff_expiry(&self) -> Option<Instant> {
        self.backoff
            .iter()
            .map(|Reverse((until, _, _))| *until)
            .min()
    }

    fn move_out_of_unschedulable(&mut self, uid: &str, now: Instant) {
        let Some(entry) = self.entries.get(uid) else {
            return;
        };
        if entry.backoff_until > now {
            self.push_backoff(uid);
        } else {
            self.push_active(uid);
        }
    }

    fn bump(&mut self, uid: &str, place: Where) -> Option<&mut Entry> {
        self.next_seq += 1;
        let seq = self.next_seq;
        let entry = self.set_place(uid, place)?;
        entry.seq = seq;
        Some(entry)
    }

    fn push_active(&mut self, uid: &str) {
        if let Some(entry) = self.bump(uid, Where::Active) {
            let key = ActiveKey {
                priority: entry.pod.priority,
                added: Reverse(entry.added),
                seq: Reverse(entry.seq),
                uid: uid.to_owned(),
            };
            self.active.push(key);
        }
    }

    fn push_backoff(&mut self, uid: &str) {
        if let Some(entry) = self.bump(uid, Where::Backoff) {
            let key = Reverse((entry.backoff_until, entry.seq, uid.to_owned()));
            self.backoff.push(key);
        }
    }
}

#[cfg(test)]
mod tests;
