//! Against a real local registry (Debian's docker-registry, started here):
//! 1. 1,000 concurrent requests for one uncached image → manifest requests sent (target 1);
//! 2. cold inspection of 50 images, in-process and through the `multiarch inspect` CLI,
//!    against `skopeo inspect --raw` on the same images in the same run.
//!
//! Run: `cargo bench -p multiarch-benches --bench inspector_registry` (needs
//! docker-registry and skopeo; scripts/test installs them). Prints medians.

#![allow(clippy::unwrap_used)] // a benchmark driver: a failure is a failed run

use multiarch_test_support::registry;

use std::{
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use multiarch_inspector::{
    ImageInspector, InspectRequest, Inspector, cache::CacheOptions, metrics::InspectorMetrics,
    registry::RegistryOptions, secrets::StaticKeyring, settings::RegistrySettings,
};
use registry::{Options, Registry, platform, push_image, push_index};

const IMAGES: usize = 50;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn inspector(settings: &RegistrySettings) -> Inspector {
    Inspector::new(
        settings.clone(),
        RegistryOptions::default(),
        CacheOptions::default(),
        Arc::new(StaticKeyring::default()),
        InspectorMetrics::default(),
    )
}

/// `images` images of two platforms each, as an index, at `bench/appN:v1`.
async fn push_images(reg: &Registry, images: usize) {
    for i in 0..images {
        let repo = format!("bench/app{i}");
        let amd = push_image(reg, &repo, "linux", "amd64", None, false, None).await;
        let arm = push_image(reg, &repo, "linux", "arm64", None, false, None).await;
        push_index(
            reg,
            &repo,
            "v1",
            false,
            &[
                (amd, platform("linux", "amd64", None), None),
                (arm, platform("linux", "arm64", None), None),
            ],
        )
        .await;
    }
}

/// `concurrent` requests for one image at once: how many reach the registry.
async fn single_flight(settings: &RegistrySettings, reg: &Registry, concurrent: usize) {
    let shared = Arc::new(inspector(settings));
    let image = format!("{}/bench/app0:v1", reg.addr);
    let tasks: Vec<_> = (0..concurrent)
        .map(|_| {
            let shared = shared.clone();
            let image = image.clone();
            tokio::spawn(async move {
                shared
                    .inspect(&InspectRequest {
                        image,
                        ..InspectRequest::default()
                    })
                    .await
                    .is_ok()
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.unwrap());
    }
    println!(
        "single-flight: {concurrent} concurrent requests ({ok} ok) -> {} manifest request(s) to the registry",
        shared.registry_requests()
    );
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: keep it short then.
    let quick = !std::env::args().any(|a| a == "--bench");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let reg = Registry::start(Options::default());
    let settings_file = reg.dir().join("registries.yaml");
    std::fs::write(&settings_file, reg.settings_yaml()).unwrap();
    let settings = RegistrySettings::load(&settings_file).unwrap();
    let images = if quick { 3 } else { IMAGES };
    push_images(&reg, images).await;

    // 1. Single-flight.
    single_flight(&settings, &reg, if quick { 50 } else { 1000 }).await;

    // 2. Cold inspection, per image.
    let binary = multiarch_binary();
    assert!(
        binary.exists(),
        "{} is missing: build it first (cargo build --release --bin multiarch)",
        binary.display()
    );
    let rounds = if quick { 1 } else { 5 };
    let mut in_process = Vec::new();
    let mut cli = Vec::new();
    let mut skopeo = Vec::new();
    for _ in 0..rounds {
        let cold = inspector(&settings);
        for i in 0..images {
            let image = format!("{}/bench/app{i}:v1", reg.addr);
            let t = Instant::now();
            cold.inspect(&InspectRequest {
                image: image.clone(),
                ..InspectRequest::default()
            })
            .await
            .unwrap();
            in_process.push(t.elapsed());
            let t = Instant::now();
            let out = Command::new(&binary)
                .args([
                    "inspect",
                    &image,
                    "--registries-config",
                    settings_file.to_str().unwrap(),
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            cli.push(t.elapsed());
            let t = Instant::now();
            let out = Command::new("skopeo")
                .args([
                    "inspect",
                    "--raw",
                    "--tls-verify=false",
                    &format!("docker://{image}"),
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            skopeo.push(t.elapsed());
        }
    }
    let (p, c, s) = (median(in_process), median(cli), median(skopeo));
    println!("cold inspection of {images} images x {rounds} rounds, median per image:");
    println!(
        "  multiarch in-process      {:>8.2} ms",
        p.as_secs_f64() * 1e3
    );
    println!(
        "  multiarch inspect (CLI)   {:>8.2} ms",
        c.as_secs_f64() * 1e3
    );
    println!(
        "  skopeo inspect --raw      {:>8.2} ms",
        s.as_secs_f64() * 1e3
    );
    println!(
        "  CLI / skopeo ratio        {:>8.2}",
        c.as_secs_f64() / s.as_secs_f64()
    );
}

/// The release (or debug) `multiarch` next to this benchmark's executable.
fn multiarch_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile_dir.join("multiarch")
}
