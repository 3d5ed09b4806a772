//! What an executable's own bytes say about where it runs (issue 49's groundwork): the ELF
//! header's class, byte order and machine (the architecture it really is, whatever the
//! image's index claims), its program interpreter (`PT_INTERP`, the loader a dynamic
//! binary needs), and for x86-64 the ISA level its GNU property notes need
//! (`GNU_PROPERTY_X86_ISA_1_NEEDED`: a binary built for x86-64-v3 says so, and glibc's
//! loader refuses to start it on an older CPU). Read from the file's first bytes only:
//! the header, the program headers and the segments they point to; what lies beyond the
//! bytes given is asked for ([`ElfError::NeedsBytes`]), never guessed. Pure and bounded;
//! hand-read with explicit byte order, so any slice of bytes is safe input.

/// Where a program header table or a segment may end, at most: a caller reads no more of
/// a file than this to learn its facts.
pub const MAX_HEAD: u64 = 1 << 20;
/// At most this many program headers are read (real executables have about a dozen).
const MAX_PROGRAM_HEADERS: u64 = 256;

const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
const PT_GNU_PROPERTY: u32 = 0x6474_e553;
const NT_GNU_PROPERTY_TYPE_0: u32 = 5;
const GNU_PROPERTY_X86_ISA_1_NEEDED: u32 = 0xc000_8002;

/// Why the facts could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file")]
    NotElf,
    /// The facts lie beyond the bytes given: read this many from the start and ask again.
    #[error("the ELF file's headers reach past the bytes read: {needed} bytes are needed")]
    NeedsBytes { needed: u64 },
    #[error("malformed ELF file: {0}")]
    Malformed(&'static str),
}

/// What an executable is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfFacts {
    /// The Go/OCI name of its architecture (`amd64`, `arm64`, `ppc64le`, ...), or the
    /// machine number for one with no such name.
    pub architecture: String,
    pub bits: u8,
    pub big_endian: bool,
    /// The program interpreter (`/lib64/ld-linux-x86-64.so.2`); `None`: static.
    pub interpreter: Option<String>,
    /// The x86-64 ISA level it needs (1 = baseline .. 4), when its notes say.
    pub x86_64_level: Option<u8>,
}

/// Reads the facts of the executable whose first bytes are `head`.
pub fn read(head: &[u8]) -> Result<ElfFacts, ElfError> {
    let file = Reader::new(head)?;
    let phoff = file.word(if file.bits == 64 { 0x20 } else { 0x1c })?;
    let phentsize = u64::from(file.u16(if file.bits == 64 { 0x36 } else { 0x2a })?);
    let phnum = u64::from(file.u16(if file.bits == 64 { 0x38 } else { 0x2c })?);
    let machine = file.u16(0x12)?;
    let wanted_entry = if file.bits == 64 { 56 } else { 32 };
    if phnum > 0 && phentsize != wanted_entry {
        return Err(ElfError::Malformed(
            "a program header entry of the wrong size",
        ));
    }
    if phnum > MAX_PROGRAM_HEADERS {
        return Err(ElfError::Malformed("too many program headers"));
    }
    let table_end = phoff
        .checked_add(phnum * phentsize)
        .ok_or(ElfError::Malformed(
            "program headers past the end of the address space",
        ))?;
    file.within(table_end)?;
    let mut facts = ElfFacts {
        architecture: architecture(machine, file.bits, file.big_endian),
        bits: file.bits,
        big_endian: file.big_endian,
        interpreter: None,
        x86_64_level: None,
    };
    let mut gnu_property_seen = false;
    for i in 0..phnum {
        let segment = file.segment(phoff + i * phentsize)?;
        match segment.kind {
            PT_INTERP => {
                let bytes = file.bytes(segment.offset, segment.size)?;
                let path = bytes.split(|b| *b == 0).next().unwrap_or_default();
                facts.interpreter = Some(String::from_utf8_lossy(path).into_owned());
            }
            // The loader reads PT_GNU_PROPERTY when there is one, else the notes.
            PT_GNU_PROPERTY | PT_NOTE if !(gnu_property_seen && segment.kind == PT_NOTE) => {
                let notes = file.bytes(segment.offset, segment.size)?;
                if let Some(level) = file.x86_isa_level(notes)? {
                    facts.x86_64_level = Some(level);
                }
                gnu_property_seen |= segment.kind == PT_GNU_PROPERTY;
            }
            _ => {}
        }
    }
    Ok(facts)
}

/// The OCI/Go name of an ELF machine.
fn architecture(machine: u16, bits: u8, big_endian: bool) -> String {
    let name = match (machine, bits, big_endian) {
        (62, 64, false) => "amd64",
        (3, 32, false) => "386",
        (183, 64, false) => "arm64",
        (40, 32, false) => "arm",
        (21, 64, false) => "ppc64le",
        (21, 64, true) => "ppc64",
        (22, 64, true) => "s390x",
        (243, 64, false) => "riscv64",
        (258, 64, false) => "loong64",
        (8, 32, true) => "mips",
        (8, 32, false) => "mipsle",
        (8, 64, true) => "mips64",
        (8, 64, false) => "mips64le",
        _ => {
            return format!(
                "ELF machine {machine} ({bits}-bit, {})",
                if big_endian {
                    "big-endian"
                } else {
                    "little-endian"
                }
            );
        }
    };
    name.to_owned()
}

struct Segment {
    kind: u32,
    offset: u64,
    size: u64,
}

struct Reader<'a> {
    head: &'a [u8],
    bits: u8,
    big_endian: bool,
}

impl<'a> Reader<'a> {
    fn new(head: &'a [u8]) -> Result<Self, ElfError> {
        if head.len() < 4 {
            return if b"\x7fELF".starts_with(head) {
                Err(ElfError::NeedsBytes { needed: 64 })
            } else {
                Err(ElfError::NotElf)
            };
        }
        if &head[..4] != b"\x7fELF" {
            return Err(ElfError::NotElf);
        }
        let bits = match head.get(4) {
            Some(1) => 32,
            Some(2) => 64,
            Some(_) => return Err(ElfError::Malformed("an unknown ELF class")),
            None => return Err(ElfError::NeedsBytes { needed: 64 }),
        };
        let header: usize = if bits == 64 { 64 } else { 52 };
        if head.len() < header {
            return Err(ElfError::NeedsBytes {
                needed: header as u64,
            });
        }
        let big_endian = match head[5] {
            1 => false,
            2 => true,
            _ => return Err(ElfError::Malformed("an unknown byte order")),
        };
        Ok(Reader {
            head,
            bits,
            big_endian,
        })
    }

    /// Whether the bytes up to `end` are there.
    fn within(&self, end: u64) -> Result<(), ElfError> {
        if end > MAX_HEAD {
            return Err(ElfError::Malformed("headers past the first MiB"));
        }
        if end > self.head.len() as u64 {
            return Err(ElfError::NeedsBytes { needed: end });
        }
        Ok(())
    }

    fn bytes(&self, offset: u64, size: u64) -> Result<&'a [u8], ElfError> {
        let end = offset.checked_add(size).ok_or(ElfError::Malformed(
            "a segment past the end of the address space",
        ))?;
        self.within(end)?;
        // Both fit in the head (at most 1 MiB), so in usize.
        let (start, end) = (
            usize::try_from(offset).unwrap_or(usize::MAX),
            usize::try_from(end).unwrap_or(usize::MAX),
        );
        self.head
            .get(start..end)
            .ok_or(ElfError::NeedsBytes { needed: end as u64 })
    }

    fn fixed<const N: usize>(&self, offset: u64) -> Result<[u8; N], ElfError> {
        let bytes = self.bytes(offset, N as u64)?;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u16(&self, offset: u64) -> Result<u16, ElfError> {
        let b = self.fixed::<2>(offset)?;
        Ok(if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }

    fn u32(&self, offset: u64) -> Result<u32, ElfError> {
        let b = self.fixed::<4>(offset)?;
        Ok(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    fn u64(&self, offset: u64) -> Result<u64, ElfError> {
        let b = self.fixed::<8>(offset)?;
        Ok(if self.big_endian {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// An address-sized field.
    fn word(&self, offset: u64) -> Result<u64, ElfError> {
        if self.bits == 64 {
            self.u64(offset)
        } else {
            self.u32(offset).map(u64::from)
        }
    }

    fn segment(&self, at: u64) -> Result<Segment, ElfError> {
        Ok(if self.bits == 64 {
            Segment {
                kind: self.u32(at)?,
                offset: self.u64(at + 8)?,
                size: self.u64(at + 32)?,
            }
        } else {
            Segment {
                kind: self.u32(at)?,
                offset: u64::from(self.u32(at + 4)?),
                size: u64::from(self.u32(at + 16)?),
            }
        })
    }

    /// The x86 ISA level the GNU property notes in `notes` need (the highest `vN` bit of
    /// `GNU_PROPERTY_X86_ISA_1_NEEDED`), if they say.
    fn x86_isa_level(&self, notes: &[u8]) -> Result<Option<u8>, ElfError> {
        let read_u32 = |bytes: &[u8], at: usize| -> Result<u32, ElfError> {
            let b: [u8; 4] = bytes
                .get(at..at + 4)
                .and_then(|s| s.try_into().ok())
                .ok_or(ElfError::Malformed("a truncated note"))?;
            Ok(if self.big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            })
        };
        let align = if self.bits == 64 { 8 } else { 4 };
        let padded = |n: usize, to: usize| n.div_ceil(to) * to;
        let mut at = 0;
        let mut level = None;
        while at + 12 <= notes.len() {
            let namesz = read_u32(notes, at)? as usize;
            let descsz = read_u32(notes, at + 4)? as usize;
            let kind = read_u32(notes, at + 8)?;
            let name_at = at + 12;
            let desc_at = name_at + padded(namesz, 4);
            let desc_end = desc_at
                .checked_add(descsz)
                .filter(|end| *end <= notes.len());
            let Some(desc_end) = desc_end else {
                return Err(ElfError::Malformed("a note past its segment"));
            };
            let name = notes.get(name_at..name_at + namesz).unwrap_or_default();
            if kind == NT_GNU_PROPERTY_TYPE_0 && name == b"GNU\0" {
                let desc = &notes[desc_at..desc_end];
                let mut p = 0;
                while p + 8 <= desc.len() {
                    let pr_type = read_u32(desc, p)?;
                    let pr_datasz = read_u32(desc, p + 4)? as usize;
                    if pr_type == GNU_PROPERTY_X86_ISA_1_NEEDED && pr_datasz >= 4 {
                        let needed = read_u32(desc, p + 8)?;
                        level = (0..4u8)
                            .rev()
                            .find(|bit| needed & (1 << bit) != 0)
                            .map(|bit| bit + 1);
                    }
                    p += 8 + padded(pr_datasz, align);
                }
            }
            at = padded(desc_end, 4);
        }
        Ok(level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use multiarch_test_support::elf::{Elf, interp};

    #[test]
    fn the_machine_says_the_architecture() {
        let cases: [(u8, bool, u16, &str); 12] = [
            (64, false, 62, "amd64"),
            (32, false, 3, "386"),
            (64, false, 183, "arm64"),
            (32, false, 40, "arm"),
            (64, false, 21, "ppc64le"),
            (64, true, 21, "ppc64"),
            (64, true, 22, "s390x"),
            (64, false, 243, "riscv64"),
            (64, false, 258, "loong64"),
            (32, true, 8, "mips"),
            (64, false, 8, "mips64le"),
            (32, false, 2, "ELF machine 2 (32-bit, little-endian)"),
        ];
        for (bits, big_endian, machine, want) in cases {
            let facts = read(&Elf::new(bits, big_endian, machine).bytes()).unwrap();
            assert_eq!(facts.architecture, want, "machine {machine}");
            assert_eq!((facts.bits, facts.big_endian), (bits, big_endian));
            assert_eq!(facts.interpreter, None, "static");
        }
    }

    #[test]
    fn a_dynamic_binary_names_its_loader_in_either_byte_order() {
        for (big_endian, machine, loader) in [
            (false, 62, "/lib64/ld-linux-x86-64.so.2"),
            (true, 21, "/lib64/ld64.so.1"),
        ] {
            let elf = Elf::new(64, big_endian, machine).segment(PT_INTERP, interp(loader));
            assert_eq!(
                read(&elf.bytes()).unwrap().interpreter.as_deref(),
                Some(loader)
            );
        }
        let arm = Elf::new(32, false, 40).segment(PT_INTERP, interp("/lib/ld-linux-armhf.so.3"));
        assert_eq!(
            read(&arm.bytes()).unwrap().interpreter.as_deref(),
            Some("/lib/ld-linux-armhf.so.3")
        );
    }

    #[test]
    fn the_isa_notes_say_the_x86_64_level() {
        // GNU_PROPERTY_X86_ISA_1_BASELINE, _V2, _V3, _V4 are bits 0..3; a binary built
        // for v3 usually sets the levels below too.
        let cases: [(u32, Option<u8>); 6] = [
            (0, None),
            (0b0001, Some(1)),
            (0b0011, Some(2)),
            (0b0111, Some(3)),
            (0b0100, Some(3)),
            (0b1111, Some(4)),
        ];
        for (needed, level) in cases {
            let elf = Elf::new(64, false, 62);
            let note = elf.isa_note(needed);
            let elf = elf.segment(PT_NOTE, note);
            assert_eq!(
                read(&elf.bytes()).unwrap().x86_64_level,
                level,
                "needed {needed:#b}"
            );
        }
        // PT_GNU_PROPERTY is what the loader reads when there is one.
        let elf = Elf::new(64, false, 62);
        let (v2, v4) = (elf.isa_note(0b0011), elf.isa_note(0b1111));
        let elf = elf.segment(PT_GNU_PROPERTY, v2).segment(PT_NOTE, v4);
        assert_eq!(read(&elf.bytes()).unwrap().x86_64_level, Some(2));
    }

    #[test]
    fn what_is_not_an_elf_or_is_cut_short_is_said() {
        assert_eq!(read(b"#!/bin/sh\necho hi\n"), Err(ElfError::NotElf));
        assert_eq!(read(b""), Err(ElfError::NeedsBytes { needed: 64 }));
        assert_eq!(read(b"\x7fEL"), Err(ElfError::NeedsBytes { needed: 64 }));
        let elf = Elf::new(64, false, 62).segment(PT_INTERP, interp("/lib64/ld-linux-x86-64.so.2"));
        let bytes = elf.bytes();
        assert_eq!(
            read(&bytes[..100]),
            Err(ElfError::NeedsBytes { needed: 120 })
        );
        assert_eq!(
            read(&bytes[..130]),
            Err(ElfError::NeedsBytes {
                needed: bytes.len() as u64
            })
        );
        assert!(read(&bytes).is_ok());
        // A segment claiming to lie beyond the first MiB is refused, not fetched.
        let mut far = bytes.clone();
        far[64 + 8..64 + 16].copy_from_slice(&(2u64 << 20).to_le_bytes());
        assert_eq!(
            read(&far),
            Err(ElfError::Malformed("headers past the first MiB"))
        );
    }

    #[test]
    fn a_real_executable_is_what_it_runs_on() {
        // This test's own binary, as the linker wrote it.
        let bytes = std::fs::read("/proc/self/exe").unwrap();
        let head = &bytes[..bytes.len().min(64 * 1024)];
        let facts = read(head).unwrap();
        let want = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "powerpc64" => "ppc64le",
            other => other,
        };
        assert_eq!(facts.architecture, want);
        assert_eq!(facts.bits, 64);
        assert!(
            facts
                .interpreter
                .as_deref()
                .is_some_and(|i| i.contains("ld")),
            "{facts:?}"
        );
    }

    #[test]
    fn any_bytes_are_safe_input() {
        // Every prefix and a few corruptions of a real-shaped file: an answer or an
        // error, never a panic.
        let elf = Elf::new(64, false, 62);
        let note = elf.isa_note(0b0111);
        let bytes = elf
            .segment(PT_INTERP, interp("/lib64/ld-linux-x86-64.so.2"))
            .segment(PT_NOTE, note)
            .bytes();
        for end in 0..bytes.len() {
            let _ = read(&bytes[..end]);
        }
        for at in 0..bytes.len() {
            let mut corrupt = bytes.clone();
            corrupt[at] ^= 0xff;
            let _ = read(&corrupt);
        }
    }
}
