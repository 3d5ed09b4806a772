use multiarch_plugins::{
    events::NodeChanges,
    model::{node::NodeBuilder, pod::PodBuilder},
};

use super::*;

fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
    Arc::new(
        PodBuilder::new("ns", name)
            .priority(priority)
            .container("c", "app:1", "2", "1Gi")
            .info(),
    )
}

fn kinds(profile: &Profile, rejectors: &[&str]) -> Vec<EventKind> {
    let mut kinds: Vec<EventKind> = rejectors
        .iter()
        .flat_map(|r| profile.events_of(r).iter().copied())
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// Pops the pod and records it as rejected by `rejectors`.
fn reject(
    q: &mut SchedulingQueue,
    profile: &Profile,
    uid: &str,
    rejectors: &[&'static str],
    now: Instant,
) {
    q.unschedulable(
        uid,
        rejectors.to_vec(),
        kinds(profile, rejectors),
        false,
        now,
    );
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
fn an_event_during_the_cycle_sends_the_pod_to_backoff() {
    let profile = Profile::default();
    let cluster = ClusterState::new();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("p", 0), t);
    q.pop();
    let node = NodeBuilder::new("n", "amd64").info();
    q.on_event(&ClusterChange::NodeAdded(&node), t, &profile, &cluster);
    reject(&mut q, &profile, "uid-ns-p", &["NodeResourcesFit"], t);
    assert_eq!(q.counts().backoff, 1);
}

#[test]
fn unschedulable_pods_move_only_when_a_hint_says_so() {
    let profile = Profile::default();
    let cluster = ClusterState::new();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("p", 0), t);
    q.pop();
    reject(&mut q, &profile, "uid-ns-p", &["NodeResourcesFit"], t);
    assert_eq!(q.counts().unschedulable, 1);
    let later = t + Duration::from_secs(20);

    // A node too small for the pod: NodeResourcesFit's hint skips it.
    let small = NodeBuilder::new("small", "amd64")
        .capacity("1", "4Gi", 110)
        .info();
    q.on_event(&ClusterChange::NodeAdded(&small), later, &profile, &cluster);
    assert_eq!(q.counts().unschedulable, 1);
    // A label change: NodeResourcesFit registered node updates, but nothing it wants grew.
    let relabelled = NodeBuilder::new("small", "amd64")
        .capacity("1", "4Gi", 110)
        .label("x", "y")
        .info();
    q.on_event(
        &ClusterChange::NodeUpdated {
            old: &small,
            new: &relabelled,
            changes: NodeChanges::between(&small, &relabelled),
        },
        later,
        &profile,
        &cluster,
    );
    assert_eq!(q.counts().unschedulable, 1);
    // A namespace change: not even a registered kind.
    q.on_event(
        &ClusterChange::NamespaceChanged("ns"),
        later,
        &profile,
        &cluster,
    );
    assert_eq!(q.counts().unschedulable, 1);
    // A running pod goes away: retry.
    let gone = PodBuilder::new("ns", "gone").node("small").info();
    q.on_event(
        &ClusterChange::AssignedPodDeleted(&gone),
        later,
        &profile,
        &cluster,
    );
    assert_eq!(q.counts().active, 1);
    let counts: HashMap<(EventKind, QueueingHint), u64> = q
        .hint_counts()
        .into_iter()
        .map(|(k, h, n)| ((k, h), n))
        .collect();
    assert_eq!(counts[&(EventKind::NodeAdd, QueueingHint::QueueSkip)], 1);
    assert_eq!(counts[&(EventKind::NodeUpdate, QueueingHint::QueueSkip)], 1);
    assert_eq!(
        counts[&(EventKind::NamespaceChange, QueueingHint::QueueSkip)],
        0
    );
    assert_eq!(
        counts[&(EventKind::AssignedPodDelete, QueueingHint::Queue)],
        1
    );
}

#[test]
fn unchanged_updates_count_as_skipped_for_the_pods_waiting_on_them() {
    let profile = Profile::default();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("p", 0), t);
    q.pop();
    reject(&mut q, &profile, "uid-ns-p", &["NodeAffinity"], t);
    q.unchanged(EventKind::NodeUpdate);
    q.unchanged(EventKind::NodeUpdate);
    let skipped = q
        .hint_counts()
        .into_iter()
        .find(|(k, h, _)| *k == EventKind::NodeUpdate && *h == QueueingHint::QueueSkip)
        .map(|(_, _, n)| n);
    assert_eq!(skipped, Some(2));
    assert_eq!(q.counts().unschedulable, 1);
}

#[test]
fn relevant_event_during_backoff_goes_to_backoff_then_active() {
    let profile = Profile::default();
    let cluster = ClusterState::new();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("a", 0), t);
    q.add_or_update(pod("b", 0), t);
    q.pop();
    reject(&mut q, &profile, "uid-ns-a", &["NodeAffinity"], t);
    assert_eq!(q.counts().unschedulable, 1);
    let node = NodeBuilder::new("n", "amd64").info();
    q.on_event(&ClusterChange::NodeAdded(&node), t, &profile, &cluster);
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
        q.unschedulable(&popped.pod.uid, vec![], vec![], true, now);
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
    let profile = Profile::default();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("a", 0), t);
    q.add_or_update(pod("b", 0), t);
    q.pop();
    q.pop();
    reject(&mut q, &profile, "uid-ns-a", &["NodeResourcesFit"], t);
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
    q.images_resolved(&["quay.io/a:1".into()]);
    assert!(q.pop().is_none(), "still waiting for quay.io/b:1");
    q.images_resolved(&["quay.io/b:1".into()]);
    assert_eq!(q.pop().unwrap().pod.name, "slow");
    assert_eq!(q.counts(), QueueCounts::default());
}

#[test]
fn resolved_images_retry_only_the_pods_that_use_them() {
    let profile = Profile::default();
    let cluster = ClusterState::new();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("x", 0), t);
    q.add_or_update(pod("y", 0), t);
    q.add_or_update(pod("z", 0), t);
    q.pop();
    q.pop();
    q.pop();
    reject(&mut q, &profile, "uid-ns-x", &["ImageArchitecture"], t);
    reject(&mut q, &profile, "uid-ns-y", &["NodeResourcesFit"], t);
    reject(&mut q, &profile, "uid-ns-z", &["ImageArchitecture"], t);
    let later = t + Duration::from_secs(30);
    let other = ["other:1".to_owned()];
    q.on_event(
        &ClusterChange::ImagesResolved(&other),
        later,
        &profile,
        &cluster,
    );
    assert_eq!(q.counts().unschedulable, 3);
    let mine = ["app:1".to_owned()];
    q.on_event(
        &ClusterChange::ImagesResolved(&mine),
        later,
        &profile,
        &cluster,
    );
    let c = q.counts();
    assert_eq!((c.active, c.unschedulable), (2, 1));
}

#[test]
fn only_updates_of_what_scheduling_reads_retry_unschedulable_pods() {
    let profile = Profile::default();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("p", 0), t);
    q.add_or_update(pod("q", 0), t);
    q.pop();
    q.pop();
    reject(&mut q, &profile, "uid-ns-p", &["NodeAffinity"], t);
    // The scheduler's own status patch: a new version, nothing new to schedule on.
    let mut status_only = (*pod("p", 0)).clone();
    status_only.resource_version = "2".into();
    status_only.extras_mut().nominated_node = Some("n1".into());
    q.add_or_update(Arc::new(status_only), t + Duration::from_secs(5));
    assert_eq!(q.counts().unschedulable, 1);
    // A new label may change what matches.
    let mut relabelled = (*pod("p", 0)).clone();
    relabelled.resource_version = "3".into();
    Arc::make_mut(&mut relabelled.labels).insert("tier".into(), "web".into());
    q.add_or_update(Arc::new(relabelled), t + Duration::from_secs(5));
    assert_eq!(q.counts().active, 1);
    assert!(q.delete("uid-ns-p"));
    assert!(q.pop().is_none());
    assert!(!q.delete("uid-ns-p"));
}

#[test]
fn a_preempting_pod_waits_for_its_evictions() {
    let profile = Profile::default();
    let cluster = ClusterState::new();
    let mut q = SchedulingQueue::default();
    let t = Instant::now();
    q.add_or_update(pod("high", 100), t);
    q.pop();
    q.wait_for_preemption(
        "uid-ns-high",
        vec!["NodeResourcesFit"],
        kinds(&profile, &["NodeResourcesFit"]),
    );
    assert_eq!(q.counts().waiting_for_preemption, 1);
    // Events do not retry it meanwhile.
    let gone = PodBuilder::new("ns", "victim").node("n").info();
    q.on_event(
        &ClusterChange::AssignedPodDeleted(&gone),
        t,
        &profile,
        &cluster,
    );
    assert!(q.pop().is_none());
    q.preemption_done("uid-ns-high");
    assert_eq!(q.pop().unwrap().attempts, 1);
}

/// A backlog placed and gone leaves the queue's tables small again (issue 53: the
/// queue kept 60 MB after 260,000 pods were placed), and what is still queued is intact.
#[test]
fn a_drained_backlog_gives_its_tables_back() {
    let mut q = SchedulingQueue::default();
    let now = Instant::now();
    for i in 0..20_000 {
        q.add_or_update(pod(&format!("p{i}"), 0), now);
    }
    let grown = q.entries.capacity();
    for _ in 0..19_990 {
        let popped = q.pop().expect("a queued pod");
        q.done(&popped.pod.uid);
    }
    assert!(
        q.entries.capacity() * 8 < grown,
        "entries: {} slots left of {grown}",
        q.entries.capacity()
    );
    assert!(q.active.capacity() * 8 < 20_000, "{}", q.active.capacity());
    let mut left = 0;
    while let Some(popped) = q.pop() {
        q.done(&popped.pod.uid);
        left += 1;
    }
    assert_eq!(left, 10);
    assert!(q.is_empty());
}
