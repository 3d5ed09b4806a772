//! A layer's tar stream from its blob as stored: gzip- or zstd-compressed, or a plain tar
//! (OCI's three layer media types), told by the blob's first bytes rather than by the
//! manifest's media type, which pushers get wrong. Shared by the bundle files reader
//! (`image_files`, over a blob in memory) and the binaries reader (`binary_reading`, over
//! a stream). Decompressed as read, never whole; the callers bound the bytes unpacked.

use std::io::{BufRead, Read};

/// The first bytes of a gzip-compressed and of a zstd-compressed layer.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The largest zstd window a layer may ask for (log2): 16 MiB, what the decoder holds
/// while it reads one layer. zstd's levels up to 19 use at most 8 MiB; a layer compressed
/// with `--long` or an ultra level asks for more and is refused, saying so, so that a
/// hostile layer cannot make the decoder hold its declared 2 GiB.
const ZSTD_WINDOW_LOG_MAX: u32 = 24;

/// The tar stream of `blob`, decompressed as it is read.
pub(crate) fn tar_stream<'a, R: BufRead + Send + 'a>(
    mut blob: R,
) -> std::io::Result<Box<dyn Read + Send + 'a>> {
    let start = blob.fill_buf()?;
    if start.starts_with(&ZSTD_MAGIC) {
        let mut decoder = zstd::stream::read::Decoder::with_buffer(blob)?;
        decoder.window_log_max(ZSTD_WINDOW_LOG_MAX)?;
        Ok(Box::new(ZstdLayer(decoder)))
    } else if start.starts_with(&GZIP_MAGIC) {
        Ok(Box::new(flate2::bufread::GzDecoder::new(blob)))
    } else {
        Ok(Box::new(blob))
    }
}

/// A zstd layer's stream, whose window refusal names the bound.
struct ZstdLayer<R: Read>(R);

impl<R: Read> Read for ZstdLayer<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).map_err(|e| {
            if e.to_string().contains("too much memory") {
                std::io::Error::other(format!(
                    "the zstd layer asks for a window above {} MiB (compressed with --long \
                     or an ultra level); not read",
                    (1u64 << ZSTD_WINDOW_LOG_MAX) >> 20
                ))
            } else {
                e
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unpacked(blob: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        tar_stream(blob)?.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn plain_gzip_and_zstd_blobs_give_the_same_stream() {
        let data: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gzip, &data).unwrap();
        let gzip = gzip.finish().unwrap();
        let zstd = zstd::encode_all(data.as_slice(), 3).unwrap();
        assert!(gzip.len() < data.len() && zstd.len() < data.len());
        for (name, blob) in [("plain", &data), ("gzip", &gzip), ("zstd", &zstd)] {
            assert_eq!(unpacked(blob).unwrap(), data, "{name}");
        }
        assert_eq!(unpacked(&[]).unwrap(), Vec::<u8>::new(), "an empty blob");
    }

    #[test]
    fn a_zstd_layer_asking_for_a_window_above_the_bound_is_refused_by_name() {
        let data = vec![7u8; 1 << 20];
        let mut encoder = zstd::stream::Encoder::new(Vec::new(), 1).unwrap();
        encoder.window_log(27).unwrap();
        encoder.long_distance_matching(true).unwrap();
        encoder.include_contentsize(false).unwrap();
        std::io::Write::write_all(&mut encoder, &data).unwrap();
        let blob = encoder.finish().unwrap();
        let error = unpacked(&blob).unwrap_err().to_string();
        assert!(error.contains("window above 16 MiB"), "{error}");
    }

    #[test]
    fn concatenated_zstd_frames_are_one_stream() {
        let mut blob = zstd::encode_all(&b"first "[..], 3).unwrap();
        blob.extend(zstd::encode_all(&b"second"[..], 19).unwrap());
        assert_eq!(unpacked(&blob).unwrap(), b"first second");
    }
}
