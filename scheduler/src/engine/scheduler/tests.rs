use std::{collections::HashMap, time::Duration};

use multiarch_plugins::model::{node::NodeBuilder, pod::PodBuilder};
use multiarch_policy::platform::Platform;
use multiarch_policy::pod_images::ContainerImage;

use super::*;
use crate::engine::image_source::CatalogImages;

const SCHED: &str = "multiarch-scheduler";

fn catalog() -> CatalogImages {
    let mut images = HashMap::new();
    for (image, archs) in [
        ("multi:1", &["amd64", "arm64"][..]),
        ("amd:1", &["amd64"][..]),
        ("arm:1", &["arm64"][..]),
    ] {
        images.insert(
            image.to_owned(),
            archs
                .iter()
                .map(|a| Platform::linux(a))
                .collect::<Vec<_>>()
                .into(),
        );
    }
    CatalogImages { images }
}

fn core() -> SchedulerCore {
    let mut core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
    let now = Instant::now();
    core.apply_node(
        NodeBuilder::new("amd", "amd64")
            .capacity("2", "4Gi", 110)
            .info(),
        now,
    );
    core.apply_node(
        NodeBuilder::new("arm", "arm64")
            .capacity("2", "4Gi", 110)
            .info(),
        now,
    );
    core
}

fn pod(name: &str, image: &str, cpu: &str) -> PodInfo {
    PodBuilder::new("ns", name)
        .scheduler(SCHED)
        .container("c", image, cpu, "100Mi")
        .info()
}

#[test]
fn schedules_on_a_compatible_node_and_says_why() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(pod("web", "arm:1", "1"), now);
    match core.schedule_next(&catalog(), now) {
        Some(Outcome::Scheduled { node, message, .. }) => {
            assert_eq!(node, "arm");
            assert_eq!(
                message,
                "Successfully assigned ns/web to arm (arm64); images support arm64"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(core.cluster.is_assumed("uid-ns-web"));
    assert!(core.schedule_next(&catalog(), now).is_none());
}

#[test]
fn ignores_pods_of_other_schedulers_gated_or_bound_pods() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(
        PodBuilder::new("ns", "default")
            .container("c", "amd:1", "", "")
            .info(),
        now,
    );
    core.apply_pod(
        PodBuilder::new("ns", "gated")
            .scheduler(SCHED)
            .gate("x/y")
            .info(),
        now,
    );
    core.apply_pod(
        PodBuilder::new("ns", "bound")
            .scheduler(SCHED)
            .node("amd")
            .container("c", "amd:1", "1", "")
            .info(),
        now,
    );
    assert!(core.schedule_next(&catalog(), now).is_none());
    // The bound pod's resources count.
    assert_eq!(core.cluster.node("amd").unwrap().requested.milli_cpu, 1000);
}

#[test]
fn a_failed_pod_retries_when_capacity_frees_up() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(
        PodBuilder::new("ns", "hog")
            .node("amd")
            .container("c", "amd:1", "2", "")
            .info(),
        now,
    );
    core.apply_pod(pod("late", "amd:1", "1"), now);
    match core.schedule_next(&catalog(), now) {
        Some(Outcome::Failed { kind, message, .. }) => {
            assert_eq!(kind, FailureKind::Unschedulable);
            assert_eq!(
                message,
                "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match the pod's \
                 image architectures (images support amd64). no new claims to deallocate, \
                 preemption: 0/2 nodes are available: 1 No preemption victims found for \
                 incoming pod, 1 Preemption is not helpful for scheduling."
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(core.queue.counts().unschedulable, 1);
    let later = now + Duration::from_secs(2);
    core.delete_pod("uid-ns-hog", later);
    match core.schedule_next(&catalog(), later) {
        Some(Outcome::Scheduled { node, .. }) => assert_eq!(node, "amd"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn waits_for_images_without_blocking_and_resumes() {
    struct Slow;
    impl ImageSource for Slow {
        fn lookup(&self, pod: &PodInfo, image: &ContainerImage) -> ImageLookup {
            if image.image == "slow:1" {
                ImageLookup::Pending
            } else {
                catalog().lookup(pod, image)
            }
        }
    }
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(pod("slow", "slow:1", "100m"), now);
    core.apply_pod(
        pod("fast", "multi:1", "100m"),
        now + Duration::from_millis(1),
    );
    assert!(matches!(
        core.schedule_next(&Slow, now),
        Some(Outcome::WaitingForImages { .. })
    ));
    assert!(matches!(
        core.schedule_next(&Slow, now),
        Some(Outcome::Scheduled { .. })
    ));
    assert!(core.schedule_next(&Slow, now).is_none());
    core.images_resolved(&["slow:1".into()], now);
    let mut ready = catalog();
    ready
        .images
        .insert("slow:1".into(), vec![Platform::linux("arm64")].into());
    assert!(
        matches!(core.schedule_next(&ready, now), Some(Outcome::Scheduled { node, .. }) if node == "arm")
    );
}

#[test]
fn binding_failure_forgets_and_retries_with_backoff() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(pod("p", "multi:1", "1"), now);
    let Some(Outcome::Scheduled { pod, attempts, .. }) = core.schedule_next(&catalog(), now) else {
        panic!("not scheduled");
    };
    core.binding_failed(pod, attempts, now);
    assert!(!core.cluster.is_assumed("uid-ns-p"));
    assert_eq!(core.queue.counts().backoff, 1);
    core.tick(now + Duration::from_secs(2));
    assert!(matches!(
        core.schedule_next(&catalog(), now),
        Some(Outcome::Scheduled { .. })
    ));
}

#[test]
fn deleting_pods_are_skipped() {
    let mut core = core();
    let now = Instant::now();
    let mut p = pod("gone", "multi:1", "1");
    core.apply_pod(p.clone(), now);
    p.deleting = true;
    p.resource_version = "2".into();
    // A deleting pod is no longer ours to schedule.
    core.apply_pod(p, now);
    assert!(core.schedule_next(&catalog(), now).is_none());
}

#[test]
fn fallback_architecture_places_pods_whose_images_cannot_be_read() {
    let inputs = PlacementInputs {
        fallback_architecture: Some("arm64".into()),
        ..PlacementInputs::default()
    };
    let mut core = SchedulerCore::new(Profile::default(), inputs, 1);
    let now = Instant::now();
    core.apply_node(NodeBuilder::new("amd", "amd64").info(), now);
    core.apply_node(NodeBuilder::new("arm", "arm64").info(), now);
    core.apply_pod(pod("private", "private:1", "100m"), now);
    match core.schedule_next(&catalog(), now) {
        Some(Outcome::Scheduled { node, message, .. }) => {
            assert_eq!(node, "arm");
            assert!(message.ends_with("image inspection failed, so the pod was placed on its fallback architecture arm64"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn inspection_failure_without_fallback_waits_with_backoff() {
    let mut core = core();
    let now = Instant::now();
    core.apply_pod(pod("private", "private:1", "100m"), now);
    match core.schedule_next(&catalog(), now) {
        Some(Outcome::Failed { kind, message, .. }) => {
            assert_eq!(kind, FailureKind::Unschedulable);
            assert!(
                message.contains("image private:1 is not in the simulation's image catalog"),
                "{message}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(core.queue.counts().backoff, 1);
}

mod volumes {
    use k8s_openapi::api::core::v1 as core_api;
    use multiarch_plugins::model::storage::{
        ClaimInfo, NO_PROVISIONER, PersistentVolumeInfo,
        builders::{ClaimBuilder, ClassBuilder, VolumeBuilder},
    };

    use super::*;
    use crate::engine::storage_objects::StorageObject;

    fn fixture(file: &str) -> serde_json::Value {
        let path = format!(
            "{}/../tests/fixtures/kube-scheduler/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    fn recorded_note(pod: &str) -> String {
        fixture("volume-events.json")["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["regarding"]["name"] == pod)
            .and_then(|e| e["note"].as_str())
            .unwrap()
            .to_owned()
    }

    fn catalog_all() -> CatalogImages {
        let mut images = catalog();
        images.images.insert(
            "registry.example/app:1".into(),
            ["amd64", "arm64", "ppc64le", "s390x"]
                .iter()
                .map(|a| Platform::linux(a))
                .collect::<Vec<_>>()
                .into(),
        );
        images
    }

    /// The four nodes of the recordings.
    fn recorded_cluster() -> SchedulerCore {
        let mut core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
        let now = Instant::now();
        for (name, arch) in [
            ("rec-amd64-0", "amd64"),
            ("rec-amd64-1", "amd64"),
            ("rec-ppc64le-0", "ppc64le"),
            ("rec-ppc64le-1", "ppc64le"),
        ] {
            core.apply_node(NodeBuilder::new(name, arch).info(), now);
        }
        core
    }

    fn recorded_pod(name: &str) -> PodInfo {
        let pods = fixture("volume-pods.json");
        let object = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap()
            .clone();
        let mut pod: core_api::Pod = serde_json::from_value(object).unwrap();
        pod.spec.as_mut().unwrap().scheduler_name = Some(SCHED.into());
        pod.spec.as_mut().unwrap().node_name = None;
        pod.status = None;
        PodInfo::from_pod(&pod).unwrap()
    }

    /// What kube-scheduler 1.36 said for the three recorded volume pods, word for word.
    #[test]
    fn the_recorded_volume_messages() {
        let mut core = recorded_cluster();
        let now = Instant::now();
        for pv in fixture("volume-pvs.json")["items"].as_array().unwrap() {
            let pv: core_api::PersistentVolume = serde_json::from_value(pv.clone()).unwrap();
            core.apply_storage(
                StorageObject::Volume(PersistentVolumeInfo::from_api(&pv).unwrap()),
                now,
            );
        }
        for pvc in fixture("volume-pvcs.json")["items"].as_array().unwrap() {
            let pvc: core_api::PersistentVolumeClaim = serde_json::from_value(pvc.clone()).unwrap();
            core.apply_storage(
                StorageObject::Claim(ClaimInfo::from_api(&pvc).unwrap()),
                now,
            );
        }
        core.apply_storage(
            StorageObject::Class(ClassBuilder::new("local-wffc", NO_PROVISIONER, true).info()),
            now,
        );
        for name in ["missing-sc-user", "no-claim-user", "wffc-user"] {
            core.apply_pod(recorded_pod(name), now);
            match core.schedule_next(&catalog_all(), now) {
                Some(Outcome::Failed { message, kind, .. }) => {
                    assert_eq!(kind, FailureKind::Unschedulable, "{name}");
                    assert_eq!(message, recorded_note(name), "{name}");
                }
                other => panic!("{name}: {other:?}"),
            }
        }
    }

    /// A StatefulSet pod whose claim is bound to a local volume on the arm64 node lands
    /// there; with an image arm64 cannot run, it says both why.
    #[test]
    fn a_bound_local_volume_decides_the_node() {
        let mut core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
        let now = Instant::now();
        for (name, arch) in [("amd-0", "amd64"), ("amd-1", "amd64"), ("arm-0", "arm64")] {
            core.apply_node(NodeBuilder::new(name, arch).info(), now);
        }
        core.apply_storage(
            StorageObject::Volume(
                VolumeBuilder::new("pv-arm", "local", "10Gi")
                    .local_on("arm-0")
                    .claim_ref("ns", "data-db-0", "uid-pvc-ns-data-db-0")
                    .phase("Bound")
                    .info(),
            ),
            now,
        );
        core.apply_storage(
            StorageObject::Claim(
                ClaimBuilder::new("ns", "data-db-0", "local", "1Gi")
                    .bound_to("pv-arm")
                    .info(),
            ),
            now,
        );
        let db = |image: &str| {
            PodBuilder::new("ns", "db-0")
                .scheduler(SCHED)
                .owner("StatefulSet", "db")
                .container("db", image, "100m", "")
                .pvc("data", "data-db-0")
                .info()
        };
        core.apply_pod(db("multi:1"), now);
        match core.schedule_next(&catalog(), now) {
            Some(Outcome::Scheduled { node, volumes, .. }) => {
                assert_eq!(node, "arm-0");
                assert!(volumes.is_empty(), "a bound claim needs no writes");
            }
            other => panic!("{other:?}"),
        }
        core.binding_dropped("uid-ns-db-0", now);
        core.apply_pod(db("amd:1"), now);
        match core.schedule_next(&catalog(), now) {
            Some(Outcome::Failed { message, .. }) => assert_eq!(
                message,
                "0/3 nodes are available: 1 node(s) didn't match the pod's image architectures \
                 (images support amd64), 2 node(s) didn't satisfy plugin(s) [VolumeBinding]. no \
                 new claims to deallocate, preemption: 0/3 nodes are available: 3 Preemption is \
                 not helpful for scheduling."
            ),
            other => panic!("{other:?}"),
        }
    }

    /// A WaitForFirstConsumer claim is provisioned on a node whose architecture fits the
    /// image; the decision is assumed until written, and undone if the binding fails.
    #[test]
    fn wait_for_first_consumer_claims_follow_the_architecture() {
        let mut core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
        let now = Instant::now();
        core.apply_node(NodeBuilder::new("amd", "amd64").info(), now);
        core.apply_node(NodeBuilder::new("arm", "arm64").info(), now);
        core.apply_storage(
            StorageObject::Class(ClassBuilder::new("dyn", "csi.example.com", true).info()),
            now,
        );
        core.apply_storage(
            StorageObject::Claim(ClaimBuilder::new("ns", "data", "dyn", "1Gi").info()),
            now,
        );
        core.apply_pod(
            PodBuilder::new("ns", "app")
                .scheduler(SCHED)
                .container("c", "arm:1", "100m", "")
                .pvc("data", "data")
                .info(),
            now,
        );
        let Some(Outcome::Scheduled {
            pod,
            node,
            volumes,
            attempts,
            ..
        }) = core.schedule_next(&catalog(), now)
        else {
            panic!("not scheduled");
        };
        assert_eq!(node, "arm");
        assert_eq!(volumes.provisions.len(), 1);
        assert_eq!(
            core.cluster
                .storage()
                .claim("ns", "data")
                .unwrap()
                .selected_node
                .as_deref(),
            Some("arm")
        );
        core.binding_failed(pod, attempts, now);
        assert!(
            core.cluster
                .storage()
                .claim("ns", "data")
                .unwrap()
                .selected_node
                .is_none(),
            "the failed binding's decision is undone"
        );
    }

    #[test]
    fn a_new_claim_retries_the_pods_waiting_for_it() {
        let mut core = SchedulerCore::new(Profile::default(), PlacementInputs::default(), 1);
        let now = Instant::now();
        core.apply_node(NodeBuilder::new("arm", "arm64").info(), now);
        core.apply_pod(
            PodBuilder::new("ns", "app")
                .scheduler(SCHED)
                .container("c", "arm:1", "100m", "")
                .pvc("data", "late")
                .info(),
            now,
        );
        assert!(matches!(
            core.schedule_next(&catalog(), now),
            Some(Outcome::Failed { .. })
        ));
        assert_eq!(core.queue.counts().unschedulable, 1);
        let later = now + Duration::from_secs(30);
        core.apply_storage(
            StorageObject::Volume(
                VolumeBuilder::new("pv", "", "1Gi")
                    .claim_ref("ns", "late", "")
                    .info(),
            ),
            later,
        );
        assert_eq!(
            core.queue.counts().unschedulable,
            1,
            "another object: no retry"
        );
        core.apply_storage(
            StorageObject::Claim(
                ClaimBuilder::new("ns", "late", "", "1Gi")
                    .bound_to("pv")
                    .info(),
            ),
            later,
        );
        core.tick(later);
        assert!(matches!(
            core.schedule_next(&catalog(), later),
            Some(Outcome::Scheduled { .. })
        ));
    }
}

/// Pods of one workload, pending or placed, hold one allocation of their labels, one of
/// their image list and one of their namespace and scheduler name (issue 53: 260,000
/// separate label maps were the largest item of a pod's memory, and its images after
/// them).
#[test]
fn pods_with_equal_labels_and_images_share_one_allocation_in_the_queue_and_the_model() {
    let shared = |a: &PodInfo, b: &PodInfo| {
        Arc::ptr_eq(&a.labels, &b.labels)
            && Arc::ptr_eq(&a.images, &b.images)
            && Arc::ptr_eq(&a.namespace, &b.namespace)
            && Arc::ptr_eq(&a.scheduler_name, &b.scheduler_name)
    };
    let mut core = core();
    let now = Instant::now();
    let labelled = |name: &str| {
        PodBuilder::new("ns", name)
            .scheduler(SCHED)
            .label("app", "web")
            .container("c", "multi:1", "100m", "100Mi")
            .info()
    };
    core.apply_pod(labelled("web-0"), now);
    core.apply_pod(labelled("web-1"), now);
    let pending: Vec<Arc<PodInfo>> = core.queue.pending().cloned().collect();
    assert_eq!(pending.len(), 2);
    assert!(shared(&pending[0], &pending[1]));
    let Some(Outcome::Scheduled { pod, node, .. }) = core.schedule_next(&catalog(), now) else {
        panic!("web is placed");
    };
    // The watch's copy of the bound pod shares them too.
    let mut bound = labelled(&pod.name);
    bound.node_name = Some(node);
    core.apply_pod(bound, now);
    let placed = core.cluster.pod(&pod.uid).expect("in the model");
    let waiting = core.queue.pending().next().expect("the other one");
    assert!(shared(placed, waiting));
}
