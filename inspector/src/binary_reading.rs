//! Reading what an image really runs (issue 49): the program its config starts (through
//! a script's `#!` line), found in its layers (`executable_lookup`), and the ELF facts of
//! that program and of its loader (`elf_facts`): the architecture the binary is, whatever
//! the index says, and the x86-64 level it and its loader need.
//!
//! Same sessions, credentials, address policy and retries as inspection. Layers are
//! streamed, never held: each one decompressed as it arrives on a blocking thread, only
//! its links and the head of the file looked for kept. Bounded per image by the bytes
//! fetched, the bytes unpacked and a deadline; a read abandoned (deadline, bound, or the
//! caller gone) stops its streams. A layer read in part cannot be checked against its
//! digest: the facts are what the registry served.

use std::{
    io::{BufReader, Read},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use futures_util::TryStreamExt;
use multiarch_policy::platform::Platform;
use serde::Serialize;
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::{
    bounded_fetch::BoundedFetch,
    elf_facts::{self, ElfFacts},
    error::InspectError,
    executable_lookup::{
        ImageCommand, InLayer, LookupError, LookupLimits, MergedLinks, read_in_layer,
    },
    image::ImageRef,
    keyring::{Credential, Keyring},
    layer_decoding,
    manifest::{self, Layer},
    registry::{Failure, RegistryClient, each_credential, malformed},
};

/// `#!` lines followed from the config's program to a binary (the kernel allows 4).
const MAX_SCRIPT_HOPS: usize = 4;

/// What reading one image's binaries may cost.
#[derive(Clone, Copy, Debug)]
pub struct BinaryLimits {
    /// Layer bytes fetched, as stored (compressed), over every pass.
    pub fetched_bytes: u64,
    /// Tar bytes unpacked from them: what a decompression bomb would inflate.
    pub unpacked_bytes: u64,
    /// The whole read.
    pub deadline: Duration,
    pub lookup: LookupLimits,
}

impl Default for BinaryLimits {
    /// A 2 GB image is read whole about three times (links, program, loader).
    fn default() -> Self {
        BinaryLimits {
            fetched_bytes: 8 << 30,
            unpacked_bytes: 24 << 30,
            deadline: Duration::from_secs(600),
            lookup: LookupLimits::default(),
        }
    }
}

/// One executable file of the image, as its ELF header says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Executable {
    /// Its path in the image, links followed.
    pub path: String,
    pub architecture: String,
    pub bits: u8,
    pub big_endian: bool,
    /// Its program interpreter as the binary names it; `None`: static.
    pub interpreter: Option<String>,
    /// The x86-64 ISA level its notes need (1..4).
    #[serde(rename = "x86_64Level", skip_serializing_if = "Option::is_none")]
    pub x86_64_level: Option<u8>,
}

impl Executable {
    fn new(path: String, facts: ElfFacts) -> Self {
        Executable {
            path,
            architecture: facts.architecture,
            bits: facts.bits,
            big_endian: facts.big_endian,
            interpreter: facts.interpreter,
            x86_64_level: facts.x86_64_level,
        }
    }
}

/// What one platform's image of an image runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BinaryFacts {
    /// The platform's manifest digest.
    pub digest: String,
    /// The platform the index (or the config) says.
    #[serde(serialize_with = "as_string")]
    pub platform: Platform,
    /// The config's program as written, and the scripts (`#!`) on the way to the binary.
    pub command: String,
    pub scripts: Vec<String>,
    pub program: Executable,
    /// The program's loader (glibc's `ld.so` carries the level glibc was built for).
    pub interpreter: Option<Executable>,
    /// Layer bytes fetched to learn this.
    pub fetched_bytes: u64,
}

fn as_string<S: serde::Serializer>(platform: &Platform, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&platform.to_string())
}

impl BinaryFacts {
    /// The x86-64 level the image needs: the higher of its program's and its loader's.
    pub fn x86_64_level(&self) -> Option<u8> {
        self.program
            .x86_64_level
            .max(self.interpreter.as_ref().and_then(|i| i.x86_64_level))
    }

    /// The architecture the program really is, when it is not the one the platform
    /// says (an index entry labelled arm64 whose binaries are amd64).
    pub fn mislabelled(&self) -> Option<&str> {
        (self.program.architecture != self.platform.architecture)
            .then_some(self.program.architecture.as_str())
    }
}

/// Where one read stands: bytes fetched and unpacked, and whether it was abandoned.
struct ReadState {
    limits: BinaryLimits,
    fetched: AtomicU64,
    unpacked: AtomicU64,
    abandoned: AtomicBool,
    /// The registry's stream failed (not the image): a transient failure.
    network_failed: AtomicBool,
}

/// Stops the read's streams when the read is dropped (deadline, caller gone).
struct AbandonOnDrop(Arc<ReadState>);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.abandoned.store(true, Ordering::SeqCst);
    }
}

/// A layer's tar stream, unpacked bytes counted against the read's bound.
struct Unpacking<R> {
    inner: R,
    state: Arc<ReadState>,
}

impl<R: Read> Read for Unpacking<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.state.abandoned.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("the read was abandoned"));
        }
        let n = self.inner.read(buf)?;
        let total = self.state.unpacked.fetch_add(n as u64, Ordering::SeqCst) + n as u64;
        if total > self.state.limits.unpacked_bytes {
            return Err(std::io::Error::other(format!(
                "the layers unpack to more than {} bytes",
                self.state.limits.unpacked_bytes
            )));
        }
        Ok(n)
    }
}

impl RegistryClient {
    /// What `image`'s build for `platform` runs (an image of one platform: its own).
    pub async fn read_binaries(
        &self,
        image: &ImageRef,
        platform: Option<&Platform>,
        keyring: &Keyring,
        limits: BinaryLimits,
    ) -> Result<BinaryFacts, InspectError> {
        let state = Arc::new(ReadState {
            limits,
            fetched: AtomicU64::new(0),
            unpacked: AtomicU64::new(0),
            abandoned: AtomicBool::new(false),
            network_failed: AtomicBool::new(false),
        });
        let _abandon = AbandonOnDrop(state.clone());
        let read = each_credential(image, keyring, |credential| {
            self.binaries_as(image, credential, platform, state.clone())
        });
        match tokio::time::timeout(limits.deadline, read).await {
            Ok(result) => result,
            Err(_) => Err(InspectError::Timeout {
                registry: image.registry().to_owned(),
                after: limits.deadline,
            }),
        }
    }

    async fn binaries_as(
        &self,
        image: &ImageRef,
        credential: Option<&Credential>,
        platform: Option<&Platform>,
        state: Arc<ReadState>,
    ) -> Result<BinaryFacts, Failure> {
        let session = self.session(image.registry(), credential);
        let manifest = self
            .platform_manifest(&session, image, credential, platform)
            .await?;
        let (digest, bytes, config) = (manifest.digest, manifest.bytes, manifest.config);
        let said =
            manifest::parse_config(&config).map_err(|e| Failure::Other(malformed(image, e)))?;
        let command =
            ImageCommand::of_config(&config).map_err(|e| Failure::Other(lookup(image, e)))?;
        let layers =
            manifest::parse_layers(&bytes).map_err(|e| Failure::Other(malformed(image, e)))?;
        let layers = Layers {
            client: self,
            session,
            image,
            credential,
            layers,
            state: state.clone(),
        };

        // The links of every layer, bottom first; then the program, through its `#!`
        // lines, read top layer first.
        let links = layers.merged_links(&command).await?;
        let mut path = links
            .find(&command)
            .map_err(|e| Failure::Other(lookup(image, e)))?;
        let mut scripts = Vec::new();
        let program = loop {
            let head = layers.head_of(&path).await?;
            match script_interpreter(&head) {
                Some(interpreter) if scripts.len() < MAX_SCRIPT_HOPS => {
                    scripts.push(path);
                    path = links
                        .resolve(&interpreter)
                        .map_err(|e| Failure::Other(lookup(image, e)))?;
                }
                Some(_) => {
                    return Err(Failure::Other(bad(
                        image,
                        &format!("more than {MAX_SCRIPT_HOPS} scripts (#!) before a binary"),
                    )));
                }
                None => break Executable::new(path.clone(), elf(image, &path, &head)?),
            }
        };
        let interpreter = match &program.interpreter {
            Some(loader) => {
                let path = links
                    .resolve(loader)
                    .map_err(|e| Failure::Other(lookup(image, e)))?;
                let head = layers.head_of(&path).await?;
                Some(Executable::new(path.clone(), elf(image, &path, &head)?))
            }
            None => None,
        };
        Ok(BinaryFacts {
            digest,
            platform: platform.cloned().unwrap_or(said),
            command: command.program,
            scripts,
            program,
            interpreter,
            fetched_bytes: state.fetched.load(Ordering::SeqCst),
        })
    }
}

/// One image's layers, streamed on demand.
struct Layers<'a> {
    client: &'a RegistryClient,
    session: Arc<BoundedFetch>,
    image: &'a ImageRef,
    credential: Option<&'a Credential>,
    layers: Vec<Layer>,
    state: Arc<ReadState>,
}

impl Layers<'_> {
    async fn merged_links(&self, command: &ImageCommand) -> Result<MergedLinks, Failure> {
        let mut links = MergedLinks::new(self.state.limits.lookup, command.bare_name());
        for layer in &self.layers {
            links = self
                .stream(layer, move |tar| links.add_layer(tar).map(|()| links))
                .await?;
        }
        Ok(links)
    }

    /// The first bytes of the regular file at `path` (resolved), top layer first.
    async fn head_of(&self, path: &str) -> Result<Vec<u8>, Failure> {
        for layer in self.layers.iter().rev() {
            let mut wanted = path.to_owned();
            // A hard link's bytes are at its target, in the same layer.
            for _ in 0..2 {
                let looked_for = wanted.clone();
                let answer = self
                    .stream(layer, move |tar| {
                        read_in_layer(tar, &looked_for, elf_facts::MAX_HEAD)
                    })
                    .await?;
                match answer {
                    InLayer::Head(head) => return Ok(head),
                    InLayer::HardLink(target) => wanted = target,
                    InLayer::Gone | InLayer::Opaque => return Err(self.missing(path)),
                    InLayer::Absent => break,
                }
            }
        }
        Err(self.missing(path))
    }

    fn missing(&self, path: &str) -> Failure {
        Failure::Other(lookup(self.image, LookupError::NotFound(path.to_owned())))
    }

    /// Streams `layer` through `work` on a blocking thread: decompressed as it arrives,
    /// its bytes counted against the read's bounds.
    async fn stream<T: Send + 'static>(
        &self,
        layer: &Layer,
        work: impl FnOnce(Box<dyn Read + Send>) -> Result<T, LookupError> + Send + 'static,
    ) -> Result<T, Failure> {
        let image = self.image;
        let response = self
            .client
            .with_retries(image, || {
                self.session
                    .blob_response(image, self.credential, &layer.digest)
            })
            .await?;
        let state = self.state.clone();
        let fetched = self.state.clone();
        let chunks = response
            .bytes_stream()
            .map_err(move |e| {
                fetched.network_failed.store(true, Ordering::SeqCst);
                std::io::Error::other(e)
            })
            .and_then({
                let state = self.state.clone();
                move |chunk| {
                    let total = state
                        .fetched
                        .fetch_add(chunk.len() as u64, Ordering::SeqCst)
                        + chunk.len() as u64;
                    let limit = state.limits.fetched_bytes;
                    std::future::ready(if total > limit {
                        Err(std::io::Error::other(format!(
                            "more than {limit} bytes of layers fetched"
                        )))
                    } else {
                        Ok(chunk)
                    })
                }
            });
        let blob = SyncIoBridge::new(StreamReader::new(chunks));
        let digest = layer.digest.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let unpacked = layer_decoding::tar_stream(BufReader::new(blob))
                .map_err(|e| LookupError::Tar(e.to_string()))?;
            work(Box::new(Unpacking {
                inner: unpacked,
                state,
            }))
        })
        .await
        .map_err(|e| Failure::Other(bad(image, &format!("layer reader failed: {e}"))))?;
        outcome.map_err(|e| {
            if self.state.network_failed.load(Ordering::SeqCst) {
                Failure::Other(InspectError::Unreachable {
                    registry: image.registry().to_owned(),
                    detail: format!("layer {digest}: {e}"),
                })
            } else {
                Failure::Other(bad(image, &format!("layer {digest}: {e}")))
            }
        })
    }
}

/// The interpreter a script's `#!` line names (`#!/usr/bin/env python3` → `/usr/bin/env`).
fn script_interpreter(head: &[u8]) -> Option<String> {
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|b| *b == b'\n').unwrap_or(line.len())];
    let line = String::from_utf8_lossy(line);
    line.split_whitespace().next().map(str::to_owned)
}

fn elf(image: &ImageRef, path: &str, head: &[u8]) -> Result<ElfFacts, Failure> {
    elf_facts::read(head).map_err(|e| Failure::Other(bad(image, &format!("{path}: {e}"))))
}

fn bad(image: &ImageRef, detail: &str) -> InspectError {
    InspectError::Malformed {
        image: image.to_string(),
        detail: detail.to_owned(),
    }
}

fn lookup(image: &ImageRef, e: LookupError) -> InspectError {
    bad(image, &e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_names_its_interpreter() {
        for (head, interpreter) in [
            (&b"#!/bin/sh\nexec x"[..], Some("/bin/sh")),
            (b"#! /usr/bin/env python3 -u\n", Some("/usr/bin/env")),
            (b"#!/bin/bash", Some("/bin/bash")),
            (b"#!\n", None),
            (b"\x7fELF\x02\x01", None),
        ] {
            assert_eq!(script_interpreter(head).as_deref(), interpreter);
        }
    }
}
