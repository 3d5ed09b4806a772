use std::sync::atomic::{AtomicUsize, Ordering};

use multiarch_policy::platform::Platform;
use tokio::sync::Notify;

use super::*;
use crate::{
    binary_reading::Executable,
    image::{ImageInfo, ManifestKind},
};

fn entry(os: &str, architecture: &str, variant: Option<&str>, digest: &str) -> PlatformEntry {
    PlatformEntry::new(&Platform::new(os, architecture, variant), digest)
}

fn index(platforms: Vec<PlatformEntry>) -> Arc<ImageInfo> {
    Arc::new(ImageInfo {
        image: "registry.test/shop/app:1".into(),
        digest: "sha256:index".into(),
        kind: ManifestKind::Index,
        platforms,
        operator_bundle: false,
        binaries_pending: false,
    })
}

/// What reading a build finds: a program of `architecture` needing `level`.
fn facts(architecture: &str, level: Option<u8>) -> BinaryFacts {
    BinaryFacts {
        digest: "sha256:build".into(),
        platform: Platform::linux(architecture),
        command: "/app".into(),
        scripts: Vec::new(),
        program: Executable {
            path: "/usr/bin/app".into(),
            architecture: architecture.into(),
            bits: 64,
            big_endian: false,
            interpreter: None,
            x86_64_level: level,
        },
        interpreter: None,
        fetched_bytes: 1000,
    }
}

fn options() -> BinaryReadingOptions {
    BinaryReadingOptions {
        failure_ttl: Duration::from_secs(3600),
        ..BinaryReadingOptions::default()
    }
}

/// Annotates until no build is pending (each read lands in a task of its own).
async fn settled(
    reads: &BinaryReads,
    info: &Arc<ImageInfo>,
    read: impl Fn(&PlatformEntry) -> Result<BinaryFacts, InspectError>,
) -> Arc<ImageInfo> {
    for _ in 0..10_000 {
        let answer = reads.annotate(info, "registry.test", |e| {
            let result = read(e);
            async move { result }
        });
        if !answer.binaries_pending {
            return answer;
        }
        tokio::task::yield_now().await;
    }
    panic!("the reads never landed");
}

#[tokio::test]
async fn the_first_answer_is_pending_and_the_next_carries_what_the_binaries_need() {
    let reads = BinaryReads::new(options(), InspectorMetrics::default());
    let info = index(vec![
        entry("linux", "amd64", None, "sha256:amd"),
        entry("linux", "arm64", None, "sha256:arm"),
    ]);
    let read = |e: &PlatformEntry| {
        Ok(if e.architecture == "amd64" {
            facts("amd64", Some(3))
        } else {
            facts("arm64", None)
        })
    };
    let first = reads.annotate(&info, "registry.test", |e| {
        let result = read(e);
        async move { result }
    });
    assert!(first.binaries_pending);
    // Placed by its platforms meanwhile.
    assert_eq!(
        first.placement_platforms().unwrap(),
        vec![Platform::linux("amd64"), Platform::linux("arm64")]
    );

    let answer = settled(&reads, &info, read).await;
    assert_eq!(
        answer.placement_platforms().unwrap(),
        vec![
            Platform::new("linux", "amd64", Some("v3")),
            Platform::linux("arm64")
        ]
    );
    assert_eq!(
        answer.platforms[0].binary.as_ref().unwrap().path,
        "/usr/bin/app"
    );
    assert!(answer.mislabelled_builds().is_empty());
    // The index as it is says what it said.
    assert_eq!(answer.platform_list(), info.platform_list());
}

#[tokio::test]
async fn a_build_whose_program_is_of_another_architecture_is_not_runnable() {
    let reads = BinaryReads::new(options(), InspectorMetrics::default());
    let info = index(vec![
        entry("linux", "amd64", None, "sha256:amd"),
        entry("linux", "arm64", None, "sha256:arm"),
    ]);
    let answer = settled(&reads, &info, |_| Ok(facts("amd64", Some(1)))).await;
    assert_eq!(
        answer.placement_platforms().unwrap(),
        vec![Platform::linux("amd64")]
    );
    assert_eq!(
        answer.mislabelled_builds(),
        vec![
            "image registry.test/shop/app:1's arm64 build runs a program built for amd64 (/usr/bin/app): not counted as runnable"
        ]
    );
    assert_eq!(
        reads
            .metrics
            .binary_reads
            .get_or_create(&crate::metrics::InspectionResultLabel {
                result: "mislabelled"
            })
            .get(),
        1
    );
}

#[tokio::test]
async fn a_failed_read_is_placed_by_its_platform_and_read_again_after_its_ttl() {
    let attempts = Arc::new(AtomicUsize::new(0));
    let info = index(vec![entry("linux", "amd64", None, "sha256:amd")]);
    let failing = |attempts: Arc<AtomicUsize>| {
        move |_: &PlatformEntry| {
            attempts.fetch_add(1, Ordering::SeqCst);
            Err(InspectError::NotFound {
                image: "registry.test/shop/app:1".into(),
            })
        }
    };

    let remembered = BinaryReads::new(options(), InspectorMetrics::default());
    let answer = settled(&remembered, &info, failing(attempts.clone())).await;
    assert_eq!(
        answer.placement_platforms().unwrap(),
        vec![Platform::linux("amd64")]
    );
    assert!(answer.platforms[0].binary.is_none());
    settled(&remembered, &info, failing(attempts.clone())).await;
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "read again before its TTL"
    );

    attempts.store(0, Ordering::SeqCst);
    let forgotten = BinaryReads::new(
        BinaryReadingOptions {
            failure_ttl: Duration::ZERO,
            ..options()
        },
        InspectorMetrics::default(),
    );
    let first = forgotten.annotate(&info, "registry.test", |_| async {
        Err(InspectError::Service("down".into()))
    });
    assert!(first.binaries_pending);
    let answer = settled(&forgotten, &info, |_| Ok(facts("amd64", Some(2)))).await;
    assert_eq!(
        answer.placement_platforms().unwrap(),
        vec![Platform::new("linux", "amd64", Some("v2"))]
    );
}

#[tokio::test]
async fn a_read_that_panics_is_a_failure_not_a_build_pending_forever() {
    let reads = BinaryReads::new(
        BinaryReadingOptions {
            failure_ttl: Duration::ZERO,
            ..options()
        },
        InspectorMetrics::default(),
    );
    let info = index(vec![entry("linux", "amd64", None, "sha256:amd")]);
    reads.annotate(&info, "registry.test", |_| async {
        panic!("a bug in a parser");
    });
    // Once the panicked read has left, the build is read again.
    let answer = settled(&reads, &info, |_| Ok(facts("amd64", Some(4)))).await;
    assert_eq!(
        answer.placement_platforms().unwrap(),
        vec![Platform::new("linux", "amd64", Some("v4"))]
    );
}

#[tokio::test]
async fn reads_are_bounded_per_registry_and_in_all() {
    let started = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Notify::new());
    let reads = BinaryReads::new(
        BinaryReadingOptions {
            per_registry: 2,
            max_waiting: 3,
            ..options()
        },
        InspectorMetrics::default(),
    );
    let hanging = |started: Arc<AtomicUsize>, release: Arc<Notify>| {
        move |_: &PlatformEntry| {
            started.fetch_add(1, Ordering::SeqCst);
            let release = release.clone();
            async move {
                release.notified().await;
                Err(InspectError::Service("released".into()))
            }
        }
    };
    let slow = index(
        (0..5)
            .map(|i| entry("linux", "amd64", None, &format!("sha256:slow{i}")))
            .collect(),
    );
    let answer = reads.annotate(
        &slow,
        "slow.test",
        hanging(started.clone(), release.clone()),
    );
    assert!(answer.binaries_pending);
    assert_eq!(
        started.load(Ordering::SeqCst),
        2,
        "one registry holds at most 2"
    );

    // Another registry's images are still read, up to the bound on reads started.
    let other = index(
        (0..3)
            .map(|i| entry("linux", "arm64", None, &format!("sha256:other{i}")))
            .collect(),
    );
    reads.annotate(
        &other,
        "other.test",
        hanging(started.clone(), release.clone()),
    );
    assert_eq!(started.load(Ordering::SeqCst), 3, "3 reads started in all");
    assert_eq!(reads.metrics.binary_reads_under_way.get(), 3);
    // Asking again starts nothing twice.
    reads.annotate(
        &slow,
        "slow.test",
        hanging(started.clone(), release.clone()),
    );
    assert_eq!(started.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn only_linux_builds_are_read_and_bundles_never() {
    let reads = BinaryReads::new(options(), InspectorMetrics::default());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let info = index(vec![
        entry("linux", "amd64", None, "sha256:amd"),
        entry("windows", "amd64", None, "sha256:win"),
    ]);
    let record = |asked: Arc<Mutex<Vec<String>>>| {
        move |e: &PlatformEntry| {
            asked.lock().unwrap().push(e.digest.clone());
            Ok(facts("amd64", Some(2)))
        }
    };
    settled(&reads, &info, record(asked.clone())).await;
    assert_eq!(*asked.lock().unwrap(), vec!["sha256:amd".to_owned()]);

    let mut bundle = (*index(vec![entry("linux", "amd64", None, "sha256:bundle")])).clone();
    bundle.operator_bundle = true;
    let bundle = Arc::new(bundle);
    let answer = reads.annotate(&bundle, "registry.test", |_| async {
        Ok(facts("amd64", Some(2)))
    });
    assert!(Arc::ptr_eq(&answer, &bundle));
}

#[test]
fn an_index_variant_is_raised_to_what_the_binaries_need_never_lowered() {
    let with = |variant: Option<&str>, architecture: &str, level: Option<u8>| {
        let mut e = entry("linux", "amd64", variant, "sha256:x");
        e.binary = Some(BinarySummary::new("/app", architecture, level));
        e.placement_platform().to_string()
    };
    let cases = [
        (None, Some(3), "amd64/v3"),
        (None, Some(1), "amd64"),
        (None, None, "amd64"),
        (Some("v2"), Some(3), "amd64/v3"),
        (Some("v4"), Some(3), "amd64/v4"),
        (Some("v3"), None, "amd64/v3"),
    ];
    for (variant, level, want) in cases {
        assert_eq!(with(variant, "amd64", level), want, "{variant:?} {level:?}");
    }
    // A path a tenant names is kept within its bound, on a character boundary.
    let long = "é".repeat(BinarySummary::MAX_PATH);
    let summary = BinarySummary::new(&long, "amd64", None);
    assert!(summary.path.len() <= BinarySummary::MAX_PATH);
    assert!(long.starts_with(&summary.path));
}
