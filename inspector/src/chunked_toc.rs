//! zstd:chunked layers (containers/storage's format, written by podman and buildah with
//! `--compression-format zstd:chunked`): each regular file's bytes are zstd frames of
//! their own, and a table of contents at the blob's end (a zstd frame in a skippable
//! frame) lists every entry of the tar stream with, for a regular file, where its frames
//! are in the blob. The layer's descriptor says where the table is
//! (`io.github.containers.zstd-chunked.manifest-position`), so a reader that can ask for
//! ranges of the blob reads the table and then only the frames of the file it wants,
//! never the layer. Pure: the table is read as it is decompressed, entry by entry, and
//! only what the caller keeps is kept.

use std::{
    fmt,
    io::{BufReader, Read},
    ops::{ControlFlow, Range},
};

use serde::{
    Deserialize, Deserializer,
    de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor},
};

use crate::executable_lookup::{EntryKind, LayerEntry, LookupError};

/// The layer descriptor's annotation that locates the table of contents.
pub const TOC_POSITION_ANNOTATION: &str = "io.github.containers.zstd-chunked.manifest-position";

/// The only table of contents format there is (the annotation's fourth field).
const TOC_TYPE_CRFS: u64 = 1;

/// Where the table of contents is in the blob: its zstd frame and the JSON's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TocPosition {
    pub offset: u64,
    pub compressed: u64,
    pub uncompressed: u64,
}

impl TocPosition {
    /// The annotation's `offset:compressed:uncompressed:type`; `None` for any other
    /// shape or type (the layer is then streamed).
    pub fn of_annotation(value: &str) -> Option<TocPosition> {
        let mut fields = value.split(':').map(|f| f.parse::<u64>().ok());
        let (offset, compressed, uncompressed, kind) = (
            fields.next()??,
            fields.next()??,
            fields.next()??,
            fields.next()??,
        );
        (fields.next().is_none() && kind == TOC_TYPE_CRFS && compressed > 0).then_some(
            TocPosition {
                offset,
                compressed,
                uncompressed,
            },
        )
    }

    /// The blob's bytes to ask for.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset.saturating_add(self.compressed)
    }
}

/// One entry of the table: what a lookup reads, and for a regular file with bytes, the
/// blob's range of its frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TocEntry {
    pub entry: LayerEntry,
    pub frames: Option<Range<u64>>,
}

/// An entry as the table writes it; every other field (modes, times, xattrs,
/// digests) is skipped as it is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEntry {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    link_name: Option<String>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    end_offset: Option<u64>,
}

impl RawEntry {
    /// `None` for a chunk (the rest of the file before it, whose range covers it).
    fn into_entry(self) -> Option<TocEntry> {
        let kind = match self.kind.as_str() {
            "chunk" => return None,
            "reg" => EntryKind::File,
            "dir" => EntryKind::Dir,
            "symlink" => EntryKind::Symlink,
            "hardlink" => EntryKind::HardLink,
            _ => EntryKind::Other,
        };
        let frames = match (kind, self.offset, self.end_offset) {
            (EntryKind::File, Some(start), Some(end)) if end > start => Some(start..end),
            _ => None,
        };
        Some(TocEntry {
            entry: LayerEntry {
                name: self.name,
                kind,
                link: self
                    .link_name
                    .filter(|_| matches!(kind, EntryKind::Symlink | EntryKind::HardLink)),
            },
            frames,
        })
    }
}

/// The longest string the table may hold. serde_json holds a string whole while it
/// parses it; a table's strings are paths (Linux's `PATH_MAX` is 4 KiB), digests and
/// xattr values (at most 64 KiB, base64): a longer one is a hostile table, refused
/// before it is held.
pub const MAX_TOC_STRING: usize = 1 << 20;

/// Refuses a JSON string longer than its bound as the bytes pass, escapes followed (an
/// escaped quote does not end a string).
struct StringBound<R> {
    inner: R,
    in_string: bool,
    escaped: bool,
    run: usize,
}

impl<R: Read> Read for StringBound<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for &byte in &buf[..n] {
            if !self.in_string {
                self.in_string = byte == b'"';
                self.run = 0;
            } else if self.escaped {
                self.escaped = false;
                self.run += 1;
            } else if byte == b'\\' {
                self.escaped = true;
                self.run += 1;
            } else if byte == b'"' {
                self.in_string = false;
            } else {
                self.run += 1;
            }
            if self.run > MAX_TOC_STRING {
                return Err(std::io::Error::other(format!(
                    "a string longer than {MAX_TOC_STRING} bytes"
                )));
            }
        }
        Ok(n)
    }
}

/// Reads the table of contents (its JSON, decompressed) entry by entry, giving each to
/// `each` in order until it breaks. Bounded by the reader (the caller counts its bytes)
/// and, in what is held at once, by [`MAX_TOC_STRING`].
pub fn read_toc(
    json: impl Read,
    each: impl FnMut(TocEntry) -> Result<ControlFlow<()>, LookupError>,
) -> Result<(), LookupError> {
    let mut seed = TableSeed {
        each,
        failed: None,
        stopped: false,
    };
    // serde_json reads a byte at a time: buffered, so that each is not a call through
    // the decompressor and the read's byte counting.
    let json = StringBound {
        inner: json,
        in_string: false,
        escaped: false,
        run: 0,
    };
    let mut deserializer = serde_json::Deserializer::from_reader(BufReader::new(json));
    let outcome = (&mut seed).deserialize(&mut deserializer);
    if let Some(error) = seed.failed {
        return Err(error);
    }
    match outcome {
        Ok(()) => Ok(()),
        // `each` had what it wanted: the rest of the table is not read.
        Err(_) if seed.stopped => Ok(()),
        Err(e) => Err(LookupError::Toc(e.to_string())),
    }
}

/// The table (`{"version": 1, "entries": [...]}`), its entries handed on one by one.
struct TableSeed<F> {
    each: F,
    /// `each`'s own error, ahead of serde's report of it.
    failed: Option<LookupError>,
    stopped: bool,
}

/// The error a visitor returns once `each` stops: ends the read without reading on.
const STOP: &str = "stopped by the reader";

impl<'de, F> DeserializeSeed<'de> for &mut TableSeed<F>
where
    F: FnMut(TocEntry) -> Result<ControlFlow<()>, LookupError>,
{
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, F> Visitor<'de> for &mut TableSeed<F>
where
    F: FnMut(TocEntry) -> Result<ControlFlow<()>, LookupError>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a zstd:chunked table of contents")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            if key == "entries" {
                map.next_value_seed(EntriesSeed(&mut *self))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

struct EntriesSeed<'s, F>(&'s mut TableSeed<F>);

impl<'de, F> DeserializeSeed<'de> for EntriesSeed<'_, F>
where
    F: FnMut(TocEntry) -> Result<ControlFlow<()>, LookupError>,
{
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de, F> Visitor<'de> for EntriesSeed<'_, F>
where
    F: FnMut(TocEntry) -> Result<ControlFlow<()>, LookupError>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("the table's entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut entries: A) -> Result<(), A::Error> {
        let table = self.0;
        while let Some(raw) = entries.next_element::<RawEntry>()? {
            let Some(entry) = raw.into_entry() else {
                continue;
            };
            match (table.each)(entry) {
                Ok(ControlFlow::Continue(())) => {}
                Ok(ControlFlow::Break(())) => {
                    table.stopped = true;
                    return Err(de::Error::custom(STOP));
                }
                Err(e) => {
                    table.failed = Some(e);
                    return Err(de::Error::custom(STOP));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_annotation_says_where_the_table_is() {
        assert_eq!(
            TocPosition::of_annotation("107123052:1009822:5525223:1"),
            Some(TocPosition {
                offset: 107_123_052,
                compressed: 1_009_822,
                uncompressed: 5_525_223
            })
        );
        for unusable in [
            "",
            "1:2:3",
            "1:2:3:2",
            "1:2:3:1:5",
            "a:2:3:1",
            "1:0:3:1",
            "-1:2:3:1",
        ] {
            assert_eq!(TocPosition::of_annotation(unusable), None, "{unusable}");
        }
    }

    fn entries_of(table: &serde_json::Value) -> Result<Vec<TocEntry>, LookupError> {
        let mut seen = Vec::new();
        read_toc(table.to_string().as_bytes(), |e| {
            seen.push(e);
            Ok(ControlFlow::Continue(()))
        })?;
        Ok(seen)
    }

    #[test]
    fn entries_are_read_with_their_frames_and_links() {
        let table = json!({
            "version": 1,
            "entries": [
                {"type": "dir", "name": "usr/", "mode": 493, "xattrs": {"user.a": "eQ=="}},
                {"type": "reg", "name": "usr/bin/app", "size": 70000, "digest": "sha256:0",
                 "offset": 210, "endOffset": 900, "chunkSize": 300},
                {"type": "chunk", "name": "usr/bin/app", "offset": 500, "endOffset": 900},
                {"type": "reg", "name": "usr/bin/empty", "size": 0},
                {"type": "symlink", "name": "bin", "linkName": "usr/bin"},
                {"type": "hardlink", "name": "usr/bin/app2", "linkName": "usr/bin/app"},
                {"type": "reg", "name": "usr/.wh.old", "size": 0},
                {"type": "char", "name": "dev/null", "linkName": "ignored"},
            ],
            "tarsplit": "ignored"
        });
        let entry = |name: &str, kind, link: Option<&str>, frames| TocEntry {
            entry: LayerEntry {
                name: name.into(),
                kind,
                link: link.map(str::to_owned),
            },
            frames,
        };
        assert_eq!(
            entries_of(&table).unwrap(),
            vec![
                entry("usr/", EntryKind::Dir, None, None),
                entry("usr/bin/app", EntryKind::File, None, Some(210..900)),
                entry("usr/bin/empty", EntryKind::File, None, None),
                entry("bin", EntryKind::Symlink, Some("usr/bin"), None),
                entry(
                    "usr/bin/app2",
                    EntryKind::HardLink,
                    Some("usr/bin/app"),
                    None
                ),
                entry("usr/.wh.old", EntryKind::File, None, None),
                entry("dev/null", EntryKind::Other, None, None),
            ]
        );
    }

    #[test]
    fn the_reader_stops_where_the_caller_has_its_answer() {
        // The table is cut after the second entry: a read that stops at the first never
        // sees the cut.
        let cut = br#"{"version":1,"entries":[{"type":"reg","name":"a","offset":1,"endOffset":2},{"type":"reg","name":"b""#;
        let mut seen = Vec::new();
        read_toc(&cut[..], |e| {
            seen.push(e.entry.name);
            Ok(ControlFlow::Break(()))
        })
        .unwrap();
        assert_eq!(seen, ["a"]);
        // Read on, the cut is an error naming the table.
        let whole = read_toc(&cut[..], |_| Ok(ControlFlow::Continue(())));
        assert!(matches!(whole, Err(LookupError::Toc(_))), "{whole:?}");
        // The caller's own error is its, not serde's.
        let refused = read_toc(&cut[..], |_| Err(LookupError::NotFound("x".into())));
        assert_eq!(refused, Err(LookupError::NotFound("x".into())));
    }

    #[test]
    fn a_string_longer_than_its_bound_is_refused_before_it_is_held() {
        let long = |filler: &str| {
            let name = filler.repeat(MAX_TOC_STRING / filler.len() + 1);
            format!(r#"{{"entries":[{{"type":"reg","name":"{name}"}}]}}"#)
        };
        // Escaped quotes and backslashes do not end the string.
        for filler in ["a", r#"\""#, r"\\"] {
            let table = long(filler);
            let refused = read_toc(table.as_bytes(), |_| Ok(ControlFlow::Continue(())));
            assert!(
                matches!(&refused, Err(LookupError::Toc(e)) if e.contains("longer than 1048576 bytes")),
                "{filler}: {refused:?}"
            );
        }
        // Many strings of the bound's length each are not one long string.
        let name = "n".repeat(MAX_TOC_STRING);
        let entries = vec![json!({"type": "reg", "name": name}); 3];
        assert_eq!(entries_of(&json!({"entries": entries})).unwrap().len(), 3);
    }

    #[test]
    fn a_table_of_another_shape_is_refused() {
        for bad in [
            json!([]),
            json!({"entries": {}}),
            json!({"entries": [{"name": "x"}]}),
        ] {
            assert!(
                matches!(entries_of(&bad), Err(LookupError::Toc(_))),
                "{bad}"
            );
        }
        assert_eq!(entries_of(&json!({"version": 1})).unwrap(), vec![]);
    }
}
