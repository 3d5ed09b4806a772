//! What reading an image's binaries costs (`multiarch inspect --binaries`,
//! `Inspector::read_binaries`), against a real local registry (Debian's docker-registry,
//! started here): one-layer images of 10 MB to 2 GB whose program is the layer's last
//! entry, behind incompressible data (the worst case: the reader streams the whole layer
//! for its links and again for the program), uncompressed and gzip-compressed; and the
//! same as zstd:chunked layers, which are read by ranges (the table of contents and the
//! program's frame) instead. Prints,
//! per image, the layer bytes fetched, the median time of 3 reads and the throughput, and
//! the process's peak resident memory after each size (the layer is never held).
//!
//! Run: `cargo bench -p multiarch-benches --bench binary_reading` (needs docker-registry;
//! scripts/test installs it; writes up to 4 GB of layers under the registry's temporary
//! directory). `cargo test --benches` runs it on the 10 MB images only.

#![allow(clippy::unwrap_used)] // a benchmark driver: a failure is a failed run

use std::{
    io::Write,
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use flate2::{Compression, write::GzEncoder};
use multiarch_inspector::{
    InspectRequest, Inspector, binary_reading::BinaryLimits, cache::CacheOptions,
    metrics::InspectorMetrics, registry::RegistryOptions, secrets::StaticKeyring,
    settings::RegistrySettings,
};
use multiarch_test_support::{
    chunked_layer::ChunkedWriter,
    elf,
    memory::peak_rss,
    registry::{Options, PlacedLayer, Registry, push_image_with_annotated_layers},
};
use rand::{RngCore, SeedableRng, rngs::SmallRng};
use serde_json::json;

const MB: u64 = 1_000_000;

/// A layer tar of `size` bytes of incompressible data (`padding`), then `server`, an
/// x86-64-v2 binary; gzip-compressed (fastest level, as the data cannot shrink) if asked.
fn write_layer(path: &Path, size: u64, gzip: bool) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut file = if gzip {
        write_tar(GzEncoder::new(file, Compression::fast()), size)
            .finish()
            .unwrap()
    } else {
        write_tar(file, size)
    };
    file.flush().unwrap();
}

/// The layer of [`write_layer`] as zstd:chunked; its descriptor's annotations.
fn write_chunked_layer(path: &Path, size: u64) -> serde_json::Value {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut writer = ChunkedWriter::new(file);
    writer.file("padding", size, RandomBytes::new(size));
    let server = elf::x86_64(None, 0b0011);
    writer.file("server", server.len() as u64, server.as_slice());
    writer.finish().1
}

fn write_tar<W: Write>(sink: W, size: u64) -> W {
    let mut tar = tar::Builder::new(sink);
    let mut header = tar::Header::new_gnu();
    header.set_path("padding").unwrap();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append(&header, RandomBytes::new(size)).unwrap();
    let server = elf::x86_64(None, 0b0011);
    let mut header = tar::Header::new_gnu();
    header.set_size(server.len() as u64);
    header.set_mode(0o755);
    tar.append_data(&mut header, "server", server.as_slice())
        .unwrap();
    tar.into_inner().unwrap()
}

/// `left` pseudo-random bytes, the same every run.
struct RandomBytes {
    rng: SmallRng,
    left: u64,
}

impl RandomBytes {
    fn new(size: u64) -> Self {
        RandomBytes {
            rng: SmallRng::seed_from_u64(size),
            left: size,
        }
    }
}

impl std::io::Read for RandomBytes {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        self.rng.fill_bytes(&mut buf[..n]);
        self.left -= n as u64;
        Ok(n)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tar,
    Gzip,
    ZstdChunked,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Tar => "tar",
            Kind::Gzip => "gzip",
            Kind::ZstdChunked => "zstd-chunked",
        }
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not: keep it short then.
    let quick = !std::env::args().any(|a| a == "--bench");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let sizes: &[u64] = if quick {
        &[10 * MB]
    } else {
        &[10 * MB, 100 * MB, 1_000 * MB, 2_000 * MB]
    };
    let reg = Registry::start(Options::default());
    let settings_file = reg.dir().join("registries.yaml");
    std::fs::write(&settings_file, reg.settings_yaml()).unwrap();
    let inspector = Inspector::new(
        RegistrySettings::load(&settings_file).unwrap(),
        RegistryOptions::default(),
        CacheOptions::default(),
        Arc::new(StaticKeyring::default()),
        InspectorMetrics::default(),
    );
    println!("image data   layer                fetched     median of 3   throughput   peak RSS");
    for &size in sizes {
        for kind in [Kind::Tar, Kind::Gzip, Kind::ZstdChunked] {
            let repository = format!("bench/binary-{}-{}", size / MB, kind.name());
            let layer = reg.dir().join("layer");
            let (media_type, annotations) = match kind {
                Kind::Tar => {
                    write_layer(&layer, size, false);
                    (
                        "application/vnd.oci.image.layer.v1.tar",
                        serde_json::Value::Null,
                    )
                }
                Kind::Gzip => {
                    write_layer(&layer, size, true);
                    (
                        "application/vnd.oci.image.layer.v1.tar+gzip",
                        serde_json::Value::Null,
                    )
                }
                Kind::ZstdChunked => (
                    "application/vnd.oci.image.layer.v1.tar+zstd",
                    write_chunked_layer(&layer, size),
                ),
            };
            let (digest, blob_size) = reg.place_blob(&repository, &layer);
            let placed = PlacedLayer {
                digest: digest.clone(),
                size: blob_size,
                media_type,
                annotations,
            };
            let pushed = push_image_with_annotated_layers(
                &reg,
                &repository,
                "amd64",
                json!({"Entrypoint": ["/server"]}),
                &[],
                std::slice::from_ref(&placed),
            )
            .await;
            let request = InspectRequest {
                image: format!("{}/{repository}@{}", reg.addr, pushed.digest),
                ..InspectRequest::default()
            };
            let mut times = Vec::new();
            let mut fetched = 0;
            for _ in 0..3 {
                let started = Instant::now();
                let facts = inspector
                    .read_binaries(&request, None, BinaryLimits::default())
                    .await
                    .unwrap();
                times.push(started.elapsed());
                assert_eq!(facts.program.path, "/server");
                assert_eq!(facts.x86_64_level(), Some(2));
                fetched = facts.fetched_bytes;
            }
            let took = median(times);
            println!(
                "{:>7} MB   {:<13}  {:>12} B  {:>10.2} s  {:>7.0} MB/s  {:>5} MiB",
                size / MB,
                kind.name(),
                fetched,
                took.as_secs_f64(),
                fetched as f64 / MB as f64 / took.as_secs_f64(),
                peak_rss() >> 20
            );
            // The blob goes: 2 GB layers of both kinds would fill a small disk.
            let hex = digest.trim_start_matches("sha256:");
            std::fs::remove_file(reg.dir().join(format!(
                "storage/docker/registry/v2/blobs/sha256/{}/{hex}/data",
                &hex[..2]
            )))
            .unwrap();
        }
    }
}
