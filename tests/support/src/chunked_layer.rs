//! zstd:chunked layers, as containers/storage writes them, for the binaries reader's
//! tests and benchmark: each regular file's bytes a zstd frame of their own, the tar
//! headers and padding between them in frames of their own, then the table of contents
//! (zstd, in a skippable frame) and the 64-byte footer (a skippable frame). Decompressed
//! whole, the blob is the layer's tar (decoders skip skippable frames); read by ranges,
//! the table says where each file's frame is.

use std::io::{Read, Write};

use crate::registry::TarEntry;

/// The annotation naming where the table of contents is.
pub const TOC_POSITION: &str = "io.github.containers.zstd-chunked.manifest-position";

const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;

/// A zstd:chunked blob of `entries`, and its layer descriptor's annotations.
pub fn chunked_layer(entries: &[TarEntry<'_>]) -> (Vec<u8>, serde_json::Value) {
    let mut writer = ChunkedWriter::new(Vec::new());
    for entry in entries {
        match entry {
            TarEntry::File(path, data) => writer.file(path, data.len() as u64, *data),
            TarEntry::Link(path, target) => writer.link(path, target),
        }
    }
    writer.finish()
}

/// Writes a zstd:chunked layer to a sink as its entries come, a file's bytes streamed.
pub struct ChunkedWriter<W: Write> {
    sink: W,
    written: u64,
    /// Tar bytes (headers, padding) not yet in a frame.
    pending: Vec<u8>,
    toc: Vec<serde_json::Value>,
}

impl<W: Write> ChunkedWriter<W> {
    pub fn new(sink: W) -> Self {
        ChunkedWriter {
            sink,
            written: 0,
            pending: Vec::new(),
            toc: Vec::new(),
        }
    }

    /// A regular file (mode 755) of `size` bytes read from `data`.
    pub fn file(&mut self, path: &str, size: u64, data: impl Read) {
        let mut header = tar::Header::new_gnu();
        header.set_path(path).unwrap();
        header.set_size(size);
        header.set_mode(0o755);
        header.set_cksum();
        self.pending.extend_from_slice(header.as_bytes());
        let mut entry = serde_json::json!({"type": "reg", "name": path, "size": size});
        if size > 0 {
            self.flush_pending();
            let start = self.written;
            let mut encoder = zstd::Encoder::new(Vec::new(), 1).unwrap();
            let mut data = data.take(size);
            let mut buffer = vec![0u8; 1 << 20];
            loop {
                let n = data.read(&mut buffer).unwrap();
                if n == 0 {
                    break;
                }
                encoder.write_all(&buffer[..n]).unwrap();
                // Written out as it compresses: a 2 GB file is never held.
                let out = std::mem::take(encoder.get_mut());
                self.write(&out);
            }
            let out = encoder.finish().unwrap();
            self.write(&out);
            entry["offset"] = start.into();
            entry["endOffset"] = self.written.into();
        }
        let padding = usize::try_from(size.div_ceil(512) * 512 - size).unwrap();
        self.pending.extend(std::iter::repeat_n(0u8, padding));
        self.toc.push(entry);
    }

    pub fn link(&mut self, path: &str, target: &str) {
        let mut header = tar::Header::new_gnu();
        header.set_path(path).unwrap();
        header.set_link_name(target).unwrap();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        header.set_mode(0o777);
        header.set_cksum();
        self.pending.extend_from_slice(header.as_bytes());
        self.toc
            .push(serde_json::json!({"type": "symlink", "name": path, "linkName": target}));
    }

    /// The tar's end, the table of contents and the footer; the sink and the layer
    /// descriptor's annotations.
    pub fn finish(mut self) -> (W, serde_json::Value) {
        self.pending.extend([0u8; 1024]);
        self.flush_pending();
        let json =
            serde_json::to_vec(&serde_json::json!({"version": 1, "entries": self.toc})).unwrap();
        let compressed = zstd::encode_all(json.as_slice(), 3).unwrap();
        self.skippable(u32::try_from(compressed.len()).unwrap());
        let toc_offset = self.written;
        self.write(&compressed);
        let footer: Vec<u8> = [
            toc_offset,
            compressed.len() as u64,
            json.len() as u64,
            1,
            0,
            0,
            0,
        ]
        .iter()
        .flat_map(|n| n.to_le_bytes())
        .chain(*b"GNUlInUx")
        .collect();
        self.skippable(64);
        self.write(&footer);
        let annotations = serde_json::json!({
            TOC_POSITION: format!("{toc_offset}:{}:{}:1", compressed.len(), json.len()),
        });
        self.sink.flush().unwrap();
        (self.sink, annotations)
    }

    fn flush_pending(&mut self) {
        if !self.pending.is_empty() {
            let frame = zstd::encode_all(self.pending.as_slice(), 3).unwrap();
            self.pending.clear();
            self.write(&frame);
        }
    }

    /// A skippable frame's header: its magic and its content's size, little-endian.
    fn skippable(&mut self, size: u32) {
        self.write(&SKIPPABLE_MAGIC.to_le_bytes());
        self.write(&size.to_le_bytes());
    }

    fn write(&mut self, bytes: &[u8]) {
        self.sink.write_all(bytes).unwrap();
        self.written += bytes.len() as u64;
    }
}
