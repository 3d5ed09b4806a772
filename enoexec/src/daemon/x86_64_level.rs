//! The x86-64 micro-architecture levels of the psABI (x86-64-v1 .. v4) a CPU offers, from
//! the feature flags the kernel reports for it (`/proc/cpuinfo`'s `flags`, which leave out
//! what the kernel cannot use, such as AVX without XSAVE): the node's level, which the
//! daemon writes as the node's variant label. What a binary needs comes from its ELF
//! notes (`multiarch_inspector::elf_facts`). No I/O.

/// Each level's features beyond the one below, as `/proc/cpuinfo` names them (the
/// psABI's lists; `pni` is SSE3, `abm` LZCNT, `lahf_lm` LAHF/SAHF in 64-bit mode,
/// `cx16` CMPXCHG16B).
const LEVELS: [&[&str]; 4] = [
    &[
        "cmov", "cx8", "fpu", "fxsr", "mmx", "syscall", "sse", "sse2",
    ],
    &[
        "cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3",
    ],
    &[
        "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave",
    ],
    &["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"],
];

/// The highest level whose features, and those of every level below, the CPU has
/// (0: not even the baseline, which no x86-64 CPU lacks).
pub fn of_cpu_flags<'a>(flags: impl IntoIterator<Item = &'a str>) -> u8 {
    let flags: std::collections::BTreeSet<&str> = flags.into_iter().collect();
    let mut level = 0;
    for (below, features) in LEVELS.iter().enumerate() {
        if !features.iter().all(|f| flags.contains(f)) {
            break;
        }
        level = u8::try_from(below + 1).unwrap_or(u8::MAX);
    }
    level
}

/// The variant label of a CPU of `level` (`v3`), as OCI platforms name x86-64 levels;
/// `None` below the baseline (no x86-64 CPU: nothing to say).
pub fn variant_label(level: u8) -> Option<String> {
    (level >= 1).then(|| format!("v{level}"))
}

/// The flags of the first processor in a `/proc/cpuinfo` (every core of a node has the
/// same), as the kernel lists them.
pub fn cpuinfo_flags(cpuinfo: &str) -> Vec<&str> {
    cpuinfo
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "flags").then_some(value)
        })
        .map(|value| value.split_whitespace().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASELINE: &str = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 syscall nx lm";
    const V2: &str = "cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3";
    const V3: &str = "avx avx2 bmi1 bmi2 f16c fma abm movbe xsave";
    const V4: &str = "avx512f avx512bw avx512cd avx512dq avx512vl";

    fn level(parts: &[&str]) -> u8 {
        let joined = parts.join(" ");
        of_cpu_flags(joined.split_whitespace())
    }

    #[test]
    fn each_level_needs_the_ones_below() {
        let cases: [(&str, &[&str], u8); 7] = [
            ("nothing", &[], 0),
            ("baseline", &[BASELINE], 1),
            ("v2", &[BASELINE, V2], 2),
            ("v3", &[BASELINE, V2, V3], 3),
            ("v4", &[BASELINE, V2, V3, V4], 4),
            // AVX-512 without AVX2 (no real CPU) is still v2.
            ("v4's without v3's", &[BASELINE, V2, V4], 2),
            // A virtual CPU hiding one v3 feature (LZCNT) is v2: what glibc's loader sees.
            (
                "v3 less one",
                &[BASELINE, V2, "avx avx2 bmi1 bmi2 f16c fma movbe xsave"],
                2,
            ),
        ];
        for (name, parts, want) in cases {
            assert_eq!(level(parts), want, "{name}");
        }
    }

    /// This machine's own CPU: the level read from its kernel's flags is the one glibc's
    /// loader finds with CPUID (`ld.so --help` lists the levels it supports, glibc 2.33+).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn this_machine_has_the_level_glibc_finds() {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let level = of_cpu_flags(cpuinfo_flags(&cpuinfo));
        let help = std::process::Command::new("/lib64/ld-linux-x86-64.so.2")
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        let glibc = (2..=4u8)
            .filter(|l| help.contains(&format!("x86-64-v{l} (supported")))
            .max()
            .unwrap_or(1);
        assert_eq!(level, glibc, "glibc's loader says:\n{help}");
        assert_eq!(variant_label(level), Some(format!("v{level}")));
        assert_eq!(variant_label(0), None);
    }

    #[test]
    fn the_flags_are_read_from_cpuinfo() {
        let cpuinfo = format!(
            "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {BASELINE} {V2} {V3}\nbugs\t\t: spectre_v1\n\nprocessor\t: 1\nflags\t\t: {BASELINE}\n"
        );
        assert_eq!(of_cpu_flags(cpuinfo_flags(&cpuinfo)), 3);
        assert!(cpuinfo_flags("processor : 0\n").is_empty());
    }
}
