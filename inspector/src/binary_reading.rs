//! Reading what an image really runs (issue 49): the program its config starts (through
//! a script's `#!` line), found in its layers (`executable_lookup`), and the ELF facts of
//! that program and of its loader (`elf_facts`): the architecture the binary is, whatever
//! the index says, and the x86-64 level it and its loader need.
//!
//! Same sessions, credentials, address policy and retries as inspection. Layers are
//! streamed, never held (`layer_reads`): each one decompressed as it arrives on a
//! blocking thread, only its links and the head of the file looked for kept; a
//! zstd:chunked layer is read by ranges, its table of contents and the file's frames. Bounded per image by the bytes
//! fetched, the bytes unpacked and a deadline; a read abandoned (deadline, bound, or the
//! caller gone) stops its streams. A layer read in part cannot be checked against its
//! digest: the facts are what the registry served.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicU64, Ordering},
};

use multiarch_policy::platform::Platform;
use serde::Serialize;

use crate::{
    elf_facts::{self, ElfFacts},
    error::InspectError,
    executable_lookup::ImageCommand,
    image::ImageRef,
    keyring::{Credential, Keyring},
    layer_reads::{Layers, bad, lookup},
    manifest,
    read_budget::{AbandonOnDrop, ReadState},
    registry::{Failure, RegistryClient, each_credential, malformed},
};

pub use crate::read_budget::BinaryLimits;

/// `#!` lines followed from the config's program to a binary (the kernel allows 4).
const MAX_SCRIPT_HOPS: usize = 4;

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
            ranges_refused: AtomicBool::new(false),
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
