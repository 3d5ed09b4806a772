//! `multiarch audit` of 1,000 workloads sharing 200 images against a real local registry
//! (Debian's docker-registry, started here): every run is a cold process, and the
//! registry's access log counts what each run asked of it. Target: one request per
//! image (200), however many workloads name it. Prints the median wall time of the runs.
//!
//! Run: `cargo bench -p multiarch-benches --bench audit_images` (needs docker-registry;
//! scripts/test installs it, and runs this once, small, in test mode).

#![allow(clippy::unwrap_used)] // a benchmark driver: a failure is a failed run

use multiarch_test_support::registry;

use std::{
    fmt::Write,
    process::Command,
    time::{Duration, Instant},
};

use futures_util::{StreamExt, stream};
use registry::{Options, Registry, platform, push_image, push_index};

/// One image in this many has no arm64 build.
const AMD64_ONLY_EVERY: usize = 10;

/// The image indexes of workload `w`: two containers, and an init container on every
/// fifth; together the workloads name every image.
fn images_of(w: usize, images: usize) -> Vec<usize> {
    let mut used = vec![w % images, (w * 7 + 3) % images];
    if w.is_multiple_of(5) {
        used.push((w * 13 + 1) % images);
    }
    used
}

fn manifests(addr: &str, workloads: usize, images: usize) -> String {
    let mut text = String::new();
    for w in 0..workloads {
        let used = images_of(w, images);
        let container =
            |i: usize, n: usize| format!("{{name: c{n}, image: '{addr}/bench/app{i}:v1'}}");
        let containers: Vec<String> = used[..2]
            .iter()
            .enumerate()
            .map(|(n, i)| container(*i, n))
            .collect();
        let init = used
            .get(2)
            .map(|i| format!("initContainers: [{}], ", container(*i, 9)))
            .unwrap_or_default();
        writeln!(
            text,
            "---\nkind: Deployment\nmetadata: {{name: w{w}, namespace: ns{}}}\nspec: {{template: {{spec: {{{init}containers: [{}]}}}}}}",
            w % 20,
            containers.join(", ")
        )
        .unwrap();
    }
    text
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The release (or debug) `multiarch` next to this benchmark's executable.
fn multiarch_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile_dir.join("multiarch")
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: keep it small then.
    let quick = !std::env::args().any(|a| a == "--bench");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (workloads, images, rounds) = if quick { (100, 20, 1) } else { (1000, 200, 5) };
    let reg = Registry::start(Options::default());
    let settings = reg.dir().join("registries.yaml");
    std::fs::write(&settings, reg.settings_yaml()).unwrap();
    let reg = &reg;
    stream::iter(0..images)
        .for_each_concurrent(8, |i: usize| async move {
            let repo = format!("bench/app{i}");
            let mut entries = Vec::new();
            let archs: &[&str] = if i.is_multiple_of(AMD64_ONLY_EVERY) {
                &["amd64"]
            } else {
                &["amd64", "arm64"]
            };
            for arch in archs {
                let pushed = push_image(reg, &repo, "linux", arch, None, false, None).await;
                entries.push((pushed, platform("linux", arch, None), None));
            }
            push_index(reg, &repo, "v1", false, &entries).await;
        })
        .await;
    let file = reg.dir().join("workloads.yaml");
    std::fs::write(&file, manifests(&reg.addr, workloads, images)).unwrap();
    let restricted = (0..workloads)
        .filter(|w| {
            images_of(*w, images)
                .iter()
                .any(|i| i.is_multiple_of(AMD64_ONLY_EVERY))
        })
        .count();

    let binary = multiarch_binary();
    assert!(
        binary.exists(),
        "{} is missing: build it first (cargo build --release --bin multiarch)",
        binary.display()
    );
    let mut times = Vec::new();
    let mut counts = Vec::new();
    for _ in 0..rounds {
        let before = reg.requests().len();
        let started = Instant::now();
        let out = Command::new(&binary)
            .args(["audit", "-f", file.to_str().unwrap()])
            .args(["--registries-config", settings.to_str().unwrap()])
            .args(["--arch", "amd64,arm64", "--concurrency", "16", "-o", "json"])
            .output()
            .unwrap();
        times.push(started.elapsed());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["workloads"].as_array().unwrap().len(), workloads);
        assert_eq!(report["verdicts"]["restricted"], restricted);
        assert_eq!(report["verdicts"]["runsOnAll"], workloads - restricted);
        let requests = reg
            .requests_when(|r| r.len() >= before + images)
            .split_off(before);
        assert!(
            requests.iter().all(|r| r.contains("/manifests/v1")),
            "{requests:?}"
        );
        counts.push(requests.len());
        assert_eq!(
            requests.len(),
            images,
            "{} registry requests for {images} images",
            requests.len()
        );
    }
    println!(
        "audit of {workloads} workloads sharing {images} images, {rounds} cold runs: median {:.0} ms; registry requests per run: {counts:?}",
        median(times).as_secs_f64() * 1e3,
    );
}
