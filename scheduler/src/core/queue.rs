//! The scheduling queue: active (priority, then age), backoff, unschedulable (waiting for
//! a cluster event that may help) and waiting-for-images (inspection in progress, never
//! blocking the cycle). kube-scheduler's `PriorityQueue`, reduced to what we need.

use std::{
    cmp::{Ordering, Reverse},
    collections::BinaryHeap,
    sync::Arc,
    time::{Duration, Instant},
};

use multiarch_plugins::model::{cluster::ClusterEvent, pod::PodInfo};
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
    entries: HashMap<String, Entry>,
    /// Indexes of the pods in unschedulable and waiting-for-images, so that cluster events
    /// (one per binding) cost nothing for the pods that are elsewhere.
    unschedulable_set: HashSet<String>,
    waiting_set: HashSet<String>,
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

    pub fn counts(&self) -> QueueCounts {
        let mut counts = QueueCounts::default();
        for e in self.entries.values() {
            match e.place {
                Where::Active => counts.active += 1,
                Where::Backoff => counts.backoff += 1,
                Where::Unschedulable => counts.unschedulable += 1,
                Where::WaitingForImages => counts.waiting_for_images += 1,
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

    /// A new pending pod, or a new version of one already queued. An update may make an
    /// unschedulable pod schedulable (its affinity changed...), so it is retried.
    pub fn add_or_update(&mut self, pod: Arc<PodInfo>, now: Instant) {
        let uid = pod.uid.clone();
        if let Some(entry) = self.entries.get_mut(&uid) {
            if entry.pod.resource_version == pod.resource_version
                && !pod.resource_version.is_empty()
            {
                return;
            }
            entry.pod = pod;
            match entry.place {
                Where::Unschedulable => self.move_out_of_unschedulable(&uid, now),
                Where::Active => self.push_active(&uid),
                Where::Backoff | Where::WaitingForImages | Where::InFlight => {}
            }
            return;
        }
        self.entries.insert(
            uid.clone(),
            Entry {
                pod,
                place: Where::Active,
                seq: 0,
                added: now,
                attempts: 0,
                backoff_until: now,
                unschedulable_since: now,
                rejectors: Vec::new(),
                cycle: 0,
                waiting_images: Vec::new(),
            },
        );
        self.push_active(&uid);
    }

    pub fn delete(&mut self, uid: &str) -> bool {
        self.unschedulable_set.remove(uid);
        self.waiting_set.remove(uid);
        self.entries.remove(uid).is_some()
    }

    /// Moves a pod and keeps the indexes right; every change of place goes through here.
    fn set_place(&mut self, uid: &str, place: Where) -> Option<&mut Entry> {
        let entry = self.entries.get_mut(uid)?;
        match entry.place {
            Where::Unschedulable => {
                self.unschedulable_set.remove(uid);
            }
            Where::WaitingForImages => {
                self.waiting_set.remove(uid);
            }
            _ => {}
        }
        match place {
            Where::Unschedulable => {
                self.unschedulable_set.insert(uid.to_owned());
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
    /// cycle) sends it to backoff; otherwise it waits in unschedulable for an event that
    /// concerns one of `rejectors`.
    pub fn unschedulable(
        &mut self,
        uid: &str,
        rejectors: Vec<&'static str>,
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
        self.push_backoff(uid);
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
    /// waiting only on them become active; pods rejected by `ImageArchitecture` retry.
    pub fn images_resolved(&mut self, resolved: &[String], now: Instant) {
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
        self.on_event(ClusterEvent::ImagePlatformsResolved, now, |plugin| {
            if plugin == "ImageArchitecture" {
                &[ClusterEvent::ImagePlatformsResolved]
            } else {
                &[]
            }
        });
    }

    /// A cluster event: unschedulable pods rejected by a plugin that registered this
    /// event move to active (or backoff if still backing off).
    pub fn on_event(
        &mut self,
        event: ClusterEvent,
        now: Instant,
        events_of: impl Fn(&str) -> &'static [ClusterEvent],
    ) {
        self.move_request_cycle = self.scheduling_cycle;
        if self.unschedulable_set.is_empty() {
            return;
        }
        let moving: Vec<String> = self
            .unschedulable_set
            .iter()
            .filter_map(|uid| self.entries.get_key_value(uid))
            .filter(|(_, e)| {
                // A pod without recorded rejectors failed for a reason we cannot map:
                // retrying is the safe choice.
                e.rejectors.is_empty() || e.rejectors.iter().any(|p| events_of(p).contains(&event))
            })
            .map(|(uid, _)| uid.clone())
            .collect();
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
mod tests {
    use multiarch_plugins::model::pod::PodBuilder;

    use super::*;

    fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new("ns", name).priority(priority).info())
    }

    fn fit_events(plugin: &str) -> &'static [ClusterEvent] {
        match plugin {
            "NodeResourcesFit" => &[ClusterEvent::NodeAdded, ClusterEvent::AssignedPodDeleted],
            "NodeAffinity" => &[ClusterEvent::NodeAdded, ClusterEvent::NodeChanged],
            _ => &[],
        }
    }

    #[test]
    fn pops_by_priority_then_age() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("old-low", 0), t);
        q.add_or_update(pod("high", 10), t + Duration::from_millis(2));
        q.add_or_update(pod("new-low", 0), t + Duration::from_millis(1));
        let order: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|p| p.pod.name.clone())
            .collect();
        assert_eq!(order, ["high", "old-low", "new-low"]);
    }

    #[test]
    fn unschedulable_pods_wait_for_a_relevant_event() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("p", 0), t);
        q.pop();
        // A cluster event while the pod was being scheduled may already have helped.
        q.on_event(ClusterEvent::NodeAdded, t, fit_events);
        q.unschedulable("uid-ns-p", vec!["NodeResourcesFit"], false, t);
        assert_eq!(
            q.counts().backoff,
            1,
            "an event during the cycle sends it to backoff"
        );

        let mut q = SchedulingQueue::default();
        q.add_or_update(pod("p", 0), t);
        q.add_or_update(pod("other", 0), t);
        q.pop();
        q.on_event(ClusterEvent::NodeChanged, t, fit_events); // cycle 1 moves nothing
        q.pop();
        q.unschedulable("uid-ns-other", vec!["NodeResourcesFit"], false, t);
        assert_eq!(q.counts().unschedulable, 1);

        // Irrelevant event: stays.
        q.on_event(
            ClusterEvent::NodeChanged,
            t + Duration::from_secs(20),
            fit_events,
        );
        assert_eq!(q.counts().unschedulable, 1);
        // Relevant event after its backoff expired: active.
        q.on_event(
            ClusterEvent::AssignedPodDeleted,
            t + Duration::from_secs(20),
            fit_events,
        );
        assert_eq!(q.counts().active, 1);
        assert_eq!(q.pop().unwrap().pod.name, "other");
    }

    #[test]
    fn relevant_event_during_backoff_goes_to_backoff_then_active() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("a", 0), t);
        q.add_or_update(pod("b", 0), t);
        q.pop();
        q.unschedulable("uid-ns-a", vec!["NodeAffinity"], false, t); // cycle 1 > move cycle 0
        assert_eq!(q.counts().unschedulable, 1);
        q.on_event(ClusterEvent::NodeAdded, t, fit_events);
        assert_eq!(q.counts().backoff, 1);
        q.flush(t + Duration::from_millis(999));
        assert_eq!(q.counts().backoff, 1);
        q.flush(t + Duration::from_secs(1));
        assert_eq!(q.counts().active, 2);
    }

    #[test]
    fn backoff_doubles_per_attempt() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("p", 0), t);
        let mut now = t;
        for expected in [1, 2, 4, 8, 10, 10] {
            let popped = q.pop().unwrap();
            q.unschedulable(&popped.pod.uid, vec![], true, now);
            assert_eq!(
                q.next_backoff_expiry(),
                Some(now + Duration::from_secs(expected))
            );
            now += Duration::from_secs(expected);
            q.flush(now);
        }
    }

    #[test]
    fn unschedulable_pods_are_flushed_after_five_minutes() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("a", 0), t);
        q.add_or_update(pod("b", 0), t);
        q.pop();
        q.pop();
        q.unschedulable("uid-ns-a", vec!["NodeResourcesFit"], false, t);
        assert_eq!(q.counts().unschedulable, 1);
        q.flush(t + Duration::from_secs(299));
        assert_eq!(q.counts().unschedulable, 1);
        q.flush(t + MAX_IN_UNSCHEDULABLE);
        assert_eq!(q.counts().active, 1);
    }

    #[test]
    fn waiting_for_images_never_blocks_others() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("slow", 10), t);
        q.add_or_update(pod("fast", 0), t);
        let slow = q.pop().unwrap();
        q.wait_for_images(
            &slow.pod.uid,
            vec!["quay.io/a:1".into(), "quay.io/b:1".into()],
        );
        assert_eq!(q.pop().unwrap().pod.name, "fast");
        q.images_resolved(&["quay.io/a:1".into()], t);
        assert!(q.pop().is_none(), "still waiting for quay.io/b:1");
        q.images_resolved(&["quay.io/b:1".into()], t);
        assert_eq!(q.pop().unwrap().pod.name, "slow");
        assert_eq!(q.counts(), QueueCounts::default());
    }

    #[test]
    fn image_resolution_retries_pods_rejected_by_image_architecture() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("x", 0), t);
        q.add_or_update(pod("y", 0), t);
        q.pop();
        q.pop();
        q.unschedulable("uid-ns-x", vec!["ImageArchitecture"], false, t);
        q.unschedulable("uid-ns-y", vec!["NodeResourcesFit"], false, t);
        q.images_resolved(&[], t + Duration::from_secs(30));
        let c = q.counts();
        assert_eq!((c.active, c.unschedulable), (1, 1));
    }

    #[test]
    fn updates_retry_unschedulable_pods_and_deletes_remove() {
        let mut q = SchedulingQueue::default();
        let t = Instant::now();
        q.add_or_update(pod("p", 0), t);
        q.add_or_update(pod("q", 0), t);
        q.pop();
        q.pop();
        q.unschedulable("uid-ns-p", vec!["NodeAffinity"], false, t);
        let mut changed = PodBuilder::new("ns", "p").info();
        changed.resource_version = "2".into();
        q.add_or_update(Arc::new(changed), t + Duration::from_secs(5));
        assert_eq!(q.counts().active, 1);
        assert!(q.delete("uid-ns-p"));
        assert!(q.pop().is_none());
        assert!(!q.delete("uid-ns-p"));
    }
}
