//! The files of an image's layers, read from the registry without a container tool: how
//! `multiarch audit --bundle-image` reads an OLM bundle image's `manifests/` and
//! `metadata/`. Same sessions, credentials, address policy, retries and memory budget as
//! inspection; every layer and every file bounded in bytes, whiteouts applied, only the
//! files asked for kept.

use std::{collections::BTreeMap, io::Read};

use crate::{
    error::InspectError,
    image::ImageRef,
    keyring::{Credential, Keyring},
    layer_decoding, manifest,
    registry::{Failure, RegistryClient, each_credential, malformed},
};

/// How much an image's files may cost.
#[derive(Clone, Copy, Debug)]
pub struct FileLimits {
    /// A layer blob, as stored (compressed).
    pub layer_bytes: usize,
    /// Layers read.
    pub layers: usize,
    /// One file kept.
    pub file_bytes: u64,
    /// Every layer's tar stream, uncompressed: what a decompression bomb would inflate.
    pub unpacked_bytes: u64,
    /// All files kept.
    pub kept_bytes: usize,
}

impl Default for FileLimits {
    /// A bundle is a few manifests: a few hundred KiB.
    fn default() -> Self {
        FileLimits {
            layer_bytes: 16 * 1024 * 1024,
            layers: 32,
            file_bytes: 8 * 1024 * 1024,
            unpacked_bytes: 128 * 1024 * 1024,
            kept_bytes: 32 * 1024 * 1024,
        }
    }
}

/// An image's files.
#[derive(Clone, Debug, Default)]
pub struct ImageFiles {
    /// The manifest digest read.
    pub digest: String,
    /// The image config's OLM bundle labels are there.
    pub operator_bundle: bool,
    /// Path (relative, no leading `/` or `./`) to contents.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl RegistryClient {
    /// The files of `image` whose path `wanted` accepts. For an index, the linux/amd64
    /// entry (or the first with a platform): a bundle's manifests are the same in all.
    pub async fn read_files(
        &self,
        image: &ImageRef,
        keyring: &Keyring,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        limits: FileLimits,
    ) -> Result<ImageFiles, InspectError> {
        let after = self.options.total_timeout;
        match tokio::time::timeout(after, self.read_files_with(image, keyring, wanted, limits))
            .await
        {
            Ok(result) => result,
            Err(_) => Err(InspectError::Timeout {
                registry: image.registry().to_owned(),
                after,
            }),
        }
    }

    async fn read_files_with(
        &self,
        image: &ImageRef,
        keyring: &Keyring,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        limits: FileLimits,
    ) -> Result<ImageFiles, InspectError> {
        each_credential(image, keyring, |credential| {
            self.files_as(image, credential, wanted, limits)
        })
        .await
    }

    async fn files_as(
        &self,
        image: &ImageRef,
        credential: Option<&Credential>,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        limits: FileLimits,
    ) -> Result<ImageFiles, Failure> {
        let session = self.session(image.registry(), credential);
        let manifest = self
            .platform_manifest(&session, image, credential, None)
            .await?;
        let (digest, bytes, config) = (manifest.digest, manifest.bytes, manifest.config);
        let operator_bundle = manifest::parse_image_config(&config)
            .map(|c| c.operator_bundle)
            .unwrap_or(false);
        let layers =
            manifest::parse_layers(&bytes).map_err(|e| Failure::Other(malformed(image, e)))?;
        if layers.len() > limits.layers {
            return Err(Failure::Other(InspectError::Malformed {
                image: image.to_string(),
                detail: format!(
                    "the image has {} layers, more than the {} read here",
                    layers.len(),
                    limits.layers
                ),
            }));
        }
        let mut unpacked = Unpacked::new(limits);
        for layer in layers {
            let blob = self
                .with_retries(image, || {
                    session.get_blob(image, credential, &layer.digest, limits.layer_bytes)
                })
                .await?
                .map_err(|bytes| Failure::Other(too_large(image, "a layer", bytes)))?;
            unpacked.add_layer(&blob, wanted).map_err(|detail| {
                Failure::Other(InspectError::Malformed {
                    image: image.to_string(),
                    detail: format!("layer {}: {detail}", layer.digest),
                })
            })?;
        }
        Ok(ImageFiles {
            digest,
            operator_bundle,
            files: unpacked.files,
        })
    }
}

fn too_large(image: &ImageRef, what: &str, bytes: usize) -> InspectError {
    InspectError::Malformed {
        image: image.to_string(),
        detail: format!("{what} exceeds the limit ({bytes} bytes or more)"),
    }
}

/// The files kept so far, layer over layer.
struct Unpacked {
    limits: FileLimits,
    files: BTreeMap<String, Vec<u8>>,
    unpacked: u64,
}

/// `./manifests/a.yaml` and `/manifests/a.yaml` → `manifests/a.yaml`.
fn normalize(path: &str) -> String {
    path.trim_start_matches("./")
        .trim_start_matches('/')
        .to_owned()
}

impl Unpacked {
    fn new(limits: FileLimits) -> Self {
        Unpacked {
            limits,
            files: BTreeMap::new(),
            unpacked: 0,
        }
    }

    fn kept(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    /// Applies one layer (a tar, gzip- or zstd-compressed or not): its whiteouts remove
    /// files of the layers below, its wanted regular files replace them.
    fn add_layer(
        &mut self,
        blob: &[u8],
        wanted: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<(), String> {
        let budget = self.limits.unpacked_bytes.saturating_sub(self.unpacked);
        let stream = layer_decoding::tar_stream(blob).map_err(|e| e.to_string())?;
        let mut counted = CountingReader {
            inner: stream.take(budget.saturating_add(1)),
            read: 0,
        };
        let result = self.read_tar(&mut counted, wanted);
        self.unpacked += counted.read;
        if self.unpacked > self.limits.unpacked_bytes {
            return Err(format!(
                "the layers unpack to more than {} bytes",
                self.limits.unpacked_bytes
            ));
        }
        result
    }

    fn read_tar(
        &mut self,
        stream: &mut dyn Read,
        wanted: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<(), String> {
        let mut archive = tar::Archive::new(stream);
        let entries = archive.entries().map_err(|e| e.to_string())?;
        for entry in entries {
            let mut entry = entry.map_err(|e| e.to_string())?;
            let path = entry
                .path()
                .map_err(|e| e.to_string())?
                .to_string_lossy()
                .into_owned();
            let path = normalize(&path);
            let (dir, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if name == ".wh..wh..opq" {
                let prefix = format!("{dir}/");
                self.files.retain(|p, _| !p.starts_with(&prefix));
                continue;
            }
            if let Some(hidden) = name.strip_prefix(".wh.") {
                let hidden = if dir.is_empty() {
                    hidden.to_owned()
                } else {
                    format!("{dir}/{hidden}")
                };
                let prefix = format!("{hidden}/");
                self.files
                    .retain(|p, _| *p != hidden && !p.starts_with(&prefix));
                continue;
            }
            if !entry.header().entry_type().is_file() || !wanted(&path) {
                continue;
            }
            let size = entry.header().size().map_err(|e| e.to_string())?;
            if size > self.limits.file_bytes {
                return Err(format!(
                    "{path} is {size} bytes, more than the {} read here",
                    self.limits.file_bytes
                ));
            }
            let mut contents = Vec::new();
            (&mut entry)
                .take(self.limits.file_bytes)
                .read_to_end(&mut contents)
                .map_err(|e| e.to_string())?;
            let replaced = self.files.get(&path).map_or(0, Vec::len);
            if self.kept() - replaced + contents.len() > self.limits.kept_bytes {
                return Err(format!(
                    "the files asked for exceed {} bytes",
                    self.limits.kept_bytes
                ));
            }
            self.files.insert(path, contents);
        }
        Ok(())
    }
}

/// Counts what the tar reader pulled through the decompressor.
struct CountingReader<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, data) in entries {
            // The name written as it is (`/metadata/...` included), as other tools may.
            let mut header = tar::Header::new_old();
            header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn manifests_only(path: &str) -> bool {
        path.starts_with("manifests/") || path.starts_with("metadata/")
    }

    #[test]
    fn layers_stack_with_whiteouts_and_only_wanted_files_are_kept() {
        let mut unpacked = Unpacked::new(FileLimits::default());
        let lower = tar_of(&[
            ("./manifests/csv.yaml", b"old"),
            ("manifests/crd.yaml", b"crd"),
            ("bin/sh", b"\x7fELF"),
        ]);
        unpacked.add_layer(&gzip(&lower), &manifests_only).unwrap();
        let upper = tar_of(&[
            ("manifests/csv.yaml", b"new"),
            ("manifests/.wh.crd.yaml", b""),
            ("/metadata/annotations.yaml", b"a: 1"),
        ]);
        unpacked.add_layer(&upper, &manifests_only).unwrap();
        assert_eq!(
            unpacked.files.keys().collect::<Vec<_>>(),
            ["manifests/csv.yaml", "metadata/annotations.yaml"]
        );
        assert_eq!(unpacked.files["manifests/csv.yaml"], b"new");
    }

    #[test]
    fn a_decompression_bomb_and_oversized_files_are_refused() {
        let limits = FileLimits {
            unpacked_bytes: 1024 * 1024,
            file_bytes: 1024,
            ..FileLimits::default()
        };
        let zeros = vec![0u8; 8 * 1024 * 1024];
        let bomb = gzip(&tar_of(&[("manifests/big.yaml", &zeros)]));
        assert!(bomb.len() < 64 * 1024, "the bomb is small compressed");
        let error = Unpacked::new(limits)
            .add_layer(&bomb, &manifests_only)
            .unwrap_err();
        assert!(error.contains("more than"), "{error}");
        let big = tar_of(&[("manifests/a.yaml", &[b'a'; 2048])]);
        let error = Unpacked::new(limits)
            .add_layer(&big, &manifests_only)
            .unwrap_err();
        assert!(error.contains("manifests/a.yaml is 2048 bytes"), "{error}");
        // A zstd layer is read like a gzip one, and bounded alike.
        let mut unpacked = Unpacked::new(FileLimits::default());
        let small = tar_of(&[("manifests/csv.yaml", b"kind: ClusterServiceVersion")]);
        unpacked
            .add_layer(
                &zstd::encode_all(small.as_slice(), 3).unwrap(),
                &manifests_only,
            )
            .unwrap();
        assert_eq!(
            unpacked.files["manifests/csv.yaml"],
            b"kind: ClusterServiceVersion"
        );
        let zstd_bomb =
            zstd::encode_all(tar_of(&[("manifests/big.yaml", &zeros)]).as_slice(), 3).unwrap();
        let error = Unpacked::new(limits)
            .add_layer(&zstd_bomb, &manifests_only)
            .unwrap_err();
        assert!(error.contains("more than"), "{error}");
    }
}
