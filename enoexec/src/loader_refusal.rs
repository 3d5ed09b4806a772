//! glibc's loader refusing to start a program on a CPU below the x86-64 level the program
//! (or the loader itself) was built for. The loader prints one line on standard error and
//! exits with status 127:
//!
//! - `/app: CPU ISA level is lower than required` (a program or library whose
//!   `GNU_PROPERTY_X86_ISA_1_NEEDED` names a level the CPU lacks);
//! - `Fatal glibc error: CPU does not support x86-64-v3` (a glibc built for that level,
//!   RHEL 10's and UBI 10's).
//!
//! Status 127 is also a shell's "command not found": the container's log tells which. The
//! daemon reads the end of it (CRI format, written by the runtime), bounded in bytes.

use std::{
    io::{Read, Seek, SeekFrom},
    path::Path,
};

/// Bytes read from the end of a container's log: the loader's line is the last thing the
/// container printed.
pub const TAIL_BYTES: u64 = 16 * 1024;

/// The longest loader line kept (the loader prints the program's path first).
pub const MAX_LINE_BYTES: usize = 512;

const ISA_LEVEL_TOO_LOW: &str = "CPU ISA level is lower than required";
const GLIBC_LEVEL_PREFIX: &str = "Fatal glibc error: CPU does not support x86-64-v";

/// What the loader said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderRefusal {
    /// The line as printed, at most [`MAX_LINE_BYTES`].
    pub line: String,
    /// The x86-64 level the line names (glibc's fatal error does; the ISA note check
    /// does not).
    pub level_needed: Option<u8>,
}

impl LoaderRefusal {
    /// The refusal a line states, if it is the loader's.
    pub fn of_line(line: &str) -> Option<LoaderRefusal> {
        let line = line.trim_end();
        let level_needed = if let Some(at) = line.find(GLIBC_LEVEL_PREFIX) {
            let level = line[at + GLIBC_LEVEL_PREFIX.len()..]
                .chars()
                .next()?
                .to_digit(10)?;
            // x86-64-v2 is the lowest level glibc can be built for.
            Some(u8::try_from(level).ok().filter(|l| *l >= 2)?)
        } else if line.ends_with(ISA_LEVEL_TOO_LOW) {
            None
        } else {
            return None;
        };
        Some(LoaderRefusal {
            line: truncate(line, MAX_LINE_BYTES).to_owned(),
            level_needed,
        })
    }

    /// The loader's last refusal among the lines of a CRI log's tail (`<time> <stream>
    /// <tag> <text>`; only standard error counts, where the loader writes). A first line
    /// cut by the tail's start is skipped.
    pub fn in_log_tail(tail: &[u8], whole_file: bool) -> Option<LoaderRefusal> {
        let text = String::from_utf8_lossy(tail);
        let mut lines = text.lines();
        if !whole_file {
            lines.next();
        }
        lines
            .filter_map(|line| {
                let mut fields = line.splitn(4, ' ');
                let (_time, stream, _tag, text) = (
                    fields.next()?,
                    fields.next()?,
                    fields.next()?,
                    fields.next()?,
                );
                (stream == "stderr").then_some(text)
            })
            .filter_map(LoaderRefusal::of_line)
            .next_back()
    }
}

/// The end of the log at `path`: at most [`TAIL_BYTES`], and whether that is the whole
/// file.
pub fn read_log_tail(path: &Path) -> std::io::Result<(Vec<u8>, bool)> {
    let mut file = std::fs::File::open(path)?;
    let length = file.metadata()?.len();
    let start = length.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::new();
    file.take(TAIL_BYTES).read_to_end(&mut tail)?;
    Ok((tail, start == 0))
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaders_lines_are_recognised_with_the_level_they_name() {
        let cases: [(&str, Option<Option<u8>>); 8] = [
            ("/app: CPU ISA level is lower than required", Some(None)),
            (
                "/usr/lib64/libfoo.so.1: CPU ISA level is lower than required",
                Some(None),
            ),
            (
                "Fatal glibc error: CPU does not support x86-64-v3",
                Some(Some(3)),
            ),
            (
                "Fatal glibc error: CPU does not support x86-64-v4\r",
                Some(Some(4)),
            ),
            // Not the loader's.
            ("sh: 1: app: not found", None),
            ("app: command not found", None),
            (
                "the CPU ISA level is lower than required, said the docs. ok",
                None,
            ),
            ("Fatal glibc error: CPU does not support x86-64-vX", None),
        ];
        for (line, expected) in cases {
            assert_eq!(
                LoaderRefusal::of_line(line).map(|r| r.level_needed),
                expected,
                "{line}"
            );
        }
    }

    #[test]
    fn the_last_refusal_on_standard_error_is_found_in_a_cri_log() {
        let log = "\
2026-11-29T10:00:00.000000000Z stdout F starting
2026-11-29T10:00:00.100000000Z stdout F /app: CPU ISA level is lower than required
2026-11-29T10:00:01.000000000Z stderr F /bin/app: CPU ISA level is lower than required
";
        let refusal = LoaderRefusal::in_log_tail(log.as_bytes(), true).unwrap();
        assert_eq!(
            refusal.line,
            "/bin/app: CPU ISA level is lower than required"
        );
        // Standard output does not count: the loader writes to standard error.
        let stdout_only =
            "2026-11-29T10:00:00Z stdout F /app: CPU ISA level is lower than required\n";
        assert_eq!(
            LoaderRefusal::in_log_tail(stdout_only.as_bytes(), true),
            None
        );
        // A first line cut by the tail's start is not read.
        let cut = "stderr F /app: CPU ISA level is lower than required\n2026-11-29T10:00:00Z stderr F bye\n";
        assert_eq!(LoaderRefusal::in_log_tail(cut.as_bytes(), false), None);
        assert_eq!(LoaderRefusal::in_log_tail(b"", true), None);
        assert_eq!(LoaderRefusal::in_log_tail(b"\xff\xfe garbage", true), None);
    }

    #[test]
    fn a_long_line_is_kept_to_its_bound_on_a_character_boundary() {
        let path = format!("/{}", "é".repeat(400));
        let refusal =
            LoaderRefusal::of_line(&format!("{path}: CPU ISA level is lower than required"))
                .unwrap();
        assert!(refusal.line.len() <= MAX_LINE_BYTES);
        assert!(refusal.line.starts_with("/é"));
    }

    #[test]
    fn only_the_end_of_a_large_log_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        let mut log = "2026-11-29T10:00:00Z stdout F noise\n".repeat(10_000);
        log.push_str(
            "2026-11-29T10:00:01Z stderr F Fatal glibc error: CPU does not support x86-64-v3\n",
        );
        std::fs::write(&path, &log).unwrap();
        let (tail, whole) = read_log_tail(&path).unwrap();
        assert_eq!(tail.len() as u64, TAIL_BYTES);
        assert!(!whole);
        let refusal = LoaderRefusal::in_log_tail(&tail, whole).unwrap();
        assert_eq!(refusal.level_needed, Some(3));
        let small = dir.path().join("1.log");
        std::fs::write(
            &small,
            "2026-11-29T10:00:01Z stderr F /a: CPU ISA level is lower than required\n",
        )
        .unwrap();
        let (tail, whole) = read_log_tail(&small).unwrap();
        assert!(whole);
        assert!(LoaderRefusal::in_log_tail(&tail, whole).is_some());
        assert!(read_log_tail(&dir.path().join("missing.log")).is_err());
    }
}
