//! One image's layers, read on demand for the binaries reader (`binary_reading`): each
//! layer streamed and decompressed as it arrives on a blocking thread, or, for a
//! zstd:chunked layer (`chunked_toc`) of a registry that serves ranges, its table of
//! contents and then only the frames of the file looked for. Every byte fetched and
//! unpacked is counted against the read's bounds; a registry that answers a range with
//! the whole blob (`200`, not `206`) has its layers streamed instead, that answer unread.

use std::{
    io::{BufReader, Read},
    ops::{ControlFlow, Range},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use futures_util::TryStreamExt;
use reqwest::{StatusCode, header};
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::{
    bounded_fetch::BoundedFetch,
    chunked_toc::read_toc,
    elf_facts,
    error::InspectError,
    executable_lookup::{
        ImageCommand, InLayer, Located, LookupError, MergedLinks, PathLocator, read_in_layer,
    },
    image::ImageRef,
    keyring::Credential,
    layer_decoding,
    manifest::Layer,
    read_budget::ReadState,
    registry::{Failure, RegistryClient},
};

/// One image's layers, read on demand.
pub(crate) struct Layers<'a> {
    pub client: &'a RegistryClient,
    pub session: Arc<BoundedFetch>,
    pub image: &'a ImageRef,
    pub credential: Option<&'a Credential>,
    pub layers: Vec<Layer>,
    pub state: Arc<ReadState>,
    /// The registry answered a range with the whole blob: every layer is streamed.
    pub ranges_refused: AtomicBool,
}

/// A layer's stream (tar, or a table of contents' JSON), unpacked bytes counted against
/// the read's bound.
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

impl Layers<'_> {
    pub async fn merged_links(&self, command: &ImageCommand) -> Result<MergedLinks, Failure> {
        let mut links = MergedLinks::new(self.state.limits.lookup, command.bare_name());
        for layer in &self.layers {
            if let Some(table) = self.table_of(layer).await? {
                links = self
                    .unpack(table, &layer.digest, move |json| {
                        let layer = links.next_layer();
                        read_toc(json, |entry| {
                            links.add_entry(layer, &entry.entry)?;
                            Ok(ControlFlow::Continue(()))
                        })?;
                        Ok(links)
                    })
                    .await?;
                continue;
            }
            links = self
                .stream(layer, move |tar| links.add_layer(tar).map(|()| links))
                .await?;
        }
        Ok(links)
    }

    /// The first bytes of the regular file at `path` (resolved), top layer first.
    pub async fn head_of(&self, path: &str) -> Result<Vec<u8>, Failure> {
        for layer in self.layers.iter().rev() {
            let mut wanted = path.to_owned();
            // A hard link's bytes are at its target, in the same layer.
            for _ in 0..2 {
                match self.in_layer(layer, &wanted).await? {
                    InLayer::Head(head) => return Ok(head),
                    InLayer::HardLink(target) => wanted = target,
                    InLayer::Gone | InLayer::Opaque => return Err(self.missing(path)),
                    InLayer::Absent => break,
                }
            }
        }
        Err(self.missing(path))
    }

    /// What `layer` holds at `path`: from its table of contents and the file's own
    /// frames where it has one and the registry serves ranges, else streamed.
    async fn in_layer(&self, layer: &Layer, path: &str) -> Result<InLayer, Failure> {
        if let Some(table) = self.table_of(layer).await? {
            let looked_for = path.to_owned();
            let (located, end) = self
                .unpack(table, &layer.digest, move |json| {
                    let mut locator = PathLocator::new(&looked_for);
                    let mut found = None;
                    read_toc(json, |entry| {
                        Ok(match locator.see(&entry.entry) {
                            Some(located) => {
                                found = Some((located, entry.frames));
                                ControlFlow::Break(())
                            }
                            None => ControlFlow::Continue(()),
                        })
                    })?;
                    let end = locator.end();
                    Ok((found, end))
                })
                .await?;
            match located {
                None => return Ok(end),
                Some((Located::HardLink(target), _)) => return Ok(InLayer::HardLink(target)),
                Some((Located::Gone, _)) => return Ok(InLayer::Gone),
                // An empty file has no frames.
                Some((Located::File, None)) => return Ok(InLayer::Head(Vec::new())),
                Some((Located::File, Some(frames))) => {
                    if let Some(file) = self.ranged(layer, frames).await? {
                        let head = self
                            .unpack(file, &layer.digest, |bytes| {
                                let mut head = Vec::new();
                                bytes
                                    .take(elf_facts::MAX_HEAD)
                                    .read_to_end(&mut head)
                                    .map_err(|e| LookupError::Tar(e.to_string()))?;
                                Ok(head)
                            })
                            .await?;
                        return Ok(InLayer::Head(head));
                    }
                }
            }
        }
        let looked_for = path.to_owned();
        self.stream(layer, move |tar| {
            read_in_layer(tar, &looked_for, elf_facts::MAX_HEAD)
        })
        .await
    }

    /// The response carrying `layer`'s table of contents, when it is a zstd:chunked layer
    /// and the registry serves ranges.
    async fn table_of(&self, layer: &Layer) -> Result<Option<reqwest::Response>, Failure> {
        match layer.toc {
            Some(toc) => self.ranged(layer, toc.range()).await,
            None => Ok(None),
        }
    }

    /// The bytes `range` of `layer`'s blob; `None` once the registry answered a range
    /// with something else (the whole blob, or another range): that answer is not read.
    async fn ranged(
        &self,
        layer: &Layer,
        range: Range<u64>,
    ) -> Result<Option<reqwest::Response>, Failure> {
        if self.ranges_refused.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let response = self
            .client
            .with_retries(self.image, || {
                self.session.blob_range_response(
                    self.image,
                    self.credential,
                    &layer.digest,
                    range.clone(),
                )
            })
            .await?;
        let expected = format!("bytes {}-{}/", range.start, range.end.saturating_sub(1));
        let served = response.status() == StatusCode::PARTIAL_CONTENT
            && response
                .headers()
                .get(header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with(&expected));
        if served {
            Ok(Some(response))
        } else {
            self.ranges_refused.store(true, Ordering::SeqCst);
            Ok(None)
        }
    }

    fn missing(&self, path: &str) -> Failure {
        Failure::Other(lookup(self.image, LookupError::NotFound(path.to_owned())))
    }

    /// Streams `layer` through `work`.
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
        self.unpack(response, &layer.digest, work).await
    }

    /// Runs `work` on `response`'s body on a blocking thread: decompressed as it arrives,
    /// its bytes counted against the read's bounds.
    async fn unpack<T: Send + 'static>(
        &self,
        response: reqwest::Response,
        digest: &str,
        work: impl FnOnce(Box<dyn Read + Send>) -> Result<T, LookupError> + Send + 'static,
    ) -> Result<T, Failure> {
        let image = self.image;
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

pub(crate) fn bad(image: &ImageRef, detail: &str) -> InspectError {
    InspectError::Malformed {
        image: image.to_string(),
        detail: detail.to_owned(),
    }
}

pub(crate) fn lookup(image: &ImageRef, e: LookupError) -> InspectError {
    bad(image, &e.to_string())
}
