//! ELF executables' first bytes, built to order: any class, byte order and machine,
//! with a program interpreter and x86-64 ISA-level notes. For the tests of what reads
//! them (`multiarch_inspector::elf_facts`) and of images that carry them.

pub const PT_INTERP: u32 = 3;
pub const PT_NOTE: u32 = 4;
pub const PT_GNU_PROPERTY: u32 = 0x6474_e553;
const NT_GNU_PROPERTY_TYPE_0: u32 = 5;
const GNU_PROPERTY_X86_ISA_1_NEEDED: u32 = 0xc000_8002;
/// `e_machine` of x86-64.
pub const EM_X86_64: u16 = 62;
/// `e_machine` of AArch64.
pub const EM_AARCH64: u16 = 183;

/// An ELF executable's first bytes: the header, the program headers, then each
/// segment's bytes, in the class and byte order asked for.
pub struct Elf {
    bits: u8,
    big_endian: bool,
    machine: u16,
    segments: Vec<(u32, Vec<u8>)>,
}

impl Elf {
    pub fn new(bits: u8, big_endian: bool, machine: u16) -> Self {
        Elf {
            bits,
            big_endian,
            machine,
            segments: Vec::new(),
        }
    }

    pub fn segment(mut self, kind: u32, bytes: Vec<u8>) -> Self {
        self.segments.push((kind, bytes));
        self
    }

    fn u16(&self, v: u16) -> Vec<u8> {
        if self.big_endian {
            v.to_be_bytes().into()
        } else {
            v.to_le_bytes().into()
        }
    }

    fn u32(&self, v: u32) -> Vec<u8> {
        if self.big_endian {
            v.to_be_bytes().into()
        } else {
            v.to_le_bytes().into()
        }
    }

    fn word(&self, v: u64) -> Vec<u8> {
        match (self.bits, self.big_endian) {
            (64, true) => v.to_be_bytes().into(),
            (64, false) => v.to_le_bytes().into(),
            _ => self.u32(u32::try_from(v).unwrap()),
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let (header, entry) = if self.bits == 64 {
            (64u64, 56u64)
        } else {
            (52, 32)
        };
        let mut out = vec![
            0x7f,
            b'E',
            b'L',
            b'F',
            if self.bits == 64 { 2 } else { 1 },
            if self.big_endian { 2 } else { 1 },
            1,
        ];
        out.resize(16, 0);
        out.extend(self.u16(2)); // e_type: EXEC
        out.extend(self.u16(self.machine));
        out.extend(self.u32(1)); // e_version
        out.extend(self.word(0)); // e_entry
        out.extend(self.word(header)); // e_phoff
        out.extend(self.word(0)); // e_shoff
        out.extend(self.u32(0)); // e_flags
        out.extend(self.u16(u16::try_from(header).unwrap()));
        out.extend(self.u16(u16::try_from(entry).unwrap()));
        out.extend(self.u16(u16::try_from(self.segments.len()).unwrap()));
        out.extend(self.u16(0));
        out.extend(self.u16(0));
        out.extend(self.u16(0));
        out.resize(usize::try_from(header).unwrap().max(64), 0);
        out.truncate(usize::try_from(header).unwrap());
        let mut data_at = header + entry * self.segments.len() as u64;
        for (kind, bytes) in &self.segments {
            let size = bytes.len() as u64;
            out.extend(self.u32(*kind));
            if self.bits == 64 {
                out.extend(self.u32(4)); // p_flags
                out.extend(self.word(data_at)); // p_offset
                out.extend(self.word(0)); // p_vaddr
                out.extend(self.word(0)); // p_paddr
                out.extend(self.word(size)); // p_filesz
                out.extend(self.word(size)); // p_memsz
                out.extend(self.word(8)); // p_align
            } else {
                out.extend(self.word(data_at));
                out.extend(self.word(0));
                out.extend(self.word(0));
                out.extend(self.word(size));
                out.extend(self.word(size));
                out.extend(self.u32(4));
                out.extend(self.u32(4));
            }
            data_at += size;
        }
        for (_, bytes) in &self.segments {
            out.extend(bytes);
        }
        out
    }

    /// A GNU property note saying `GNU_PROPERTY_X86_ISA_1_NEEDED` = `needed`.
    pub fn isa_note(&self, needed: u32) -> Vec<u8> {
        let mut desc = self.u32(GNU_PROPERTY_X86_ISA_1_NEEDED);
        desc.extend(self.u32(4));
        desc.extend(self.u32(needed));
        desc.resize(16, 0); // padded to 8
        let mut note = self.u32(4);
        note.extend(self.u32(u32::try_from(desc.len()).unwrap()));
        note.extend(self.u32(NT_GNU_PROPERTY_TYPE_0));
        note.extend(b"GNU\0");
        note.extend(desc);
        note
    }
}

pub fn interp(path: &str) -> Vec<u8> {
    let mut bytes = path.as_bytes().to_vec();
    bytes.push(0);
    bytes
}

/// A 64-bit little-endian x86-64 executable: dynamic with `loader`, static without;
/// needing the x86-64 ISA levels of bits `needed` (`0b0111`: up to v3) when not 0.
pub fn x86_64(loader: Option<&str>, needed: u32) -> Vec<u8> {
    let mut elf = Elf::new(64, false, EM_X86_64);
    if let Some(loader) = loader {
        elf = elf.segment(PT_INTERP, interp(loader));
    }
    if needed != 0 {
        let note = elf.isa_note(needed);
        elf = elf.segment(PT_NOTE, note);
    }
    elf.bytes()
}
