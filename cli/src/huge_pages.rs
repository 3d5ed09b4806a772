//! The scheduling roles' heap on transparent huge pages.
//!
//! A scheduling cycle reads a few cache lines of each node it visits: on a large cluster
//! about 1,400 of them (1 % of 130,000), each on its own 4 KiB page, so most of those reads
//! miss the TLB as well as the cache. On 2 MiB pages the same cycle took two thirds of the
//! time (docs/performance.md: 1.48x the pods/s at 130,000 nodes, 1.13x at 15,000, the same
//! memory). glibc's malloc asks the kernel for transparent huge pages for its heap when its
//! tunable `glibc.malloc.hugetlb` is 1 (glibc 2.35 and later), but it reads its tunables
//! only when a process starts: so `scheduler` and `simulate` execute themselves again (the
//! same pid, arguments and environment, plus the tunable) before they do anything else.
//!
//! Only when it changes something: the kernel gives huge pages to memory that asks
//! (`madvise`, Debian's and Ubuntu's default; with `always` the heap has them already,
//! with `never` it cannot), the binary uses glibc, and `GLIBC_TUNABLES` is not set (a value
//! set is the user's choice and kept; set it empty to keep the heap on 4 KiB pages).

use std::ffi::OsStr;

/// glibc's tunables, read once at process start.
const TUNABLES: &str = "GLIBC_TUNABLES";
/// What the roles set it to.
const HUGE_PAGES: &str = "glibc.malloc.hugetlb=1";
/// Set in the process executed again, so it never executes itself a third time (glibc
/// drops `GLIBC_TUNABLES` from the environment of a process with raised privileges).
const EXECUTED_AGAIN: &str = "MULTIARCH_HUGE_PAGES_ASKED";
/// The kernel's transparent huge page mode: `always [madvise] never`, the chosen one in
/// brackets.
const THP_MODE: &str = "/sys/kernel/mm/transparent_hugepage/enabled";

/// Whether a process that starts with these `GLIBC_TUNABLES`, executed-again marker and
/// kernel mode gains huge pages by executing itself again with [`HUGE_PAGES`].
fn gains_by_executing_again(
    tunables: Option<&OsStr>,
    executed_again: Option<&OsStr>,
    thp_mode: Option<&str>,
) -> bool {
    tunables.is_none()
        && executed_again.is_none()
        && thp_mode.is_some_and(|m| m.contains("[madvise]"))
}

/// Executes this binary again with [`HUGE_PAGES`] when that gains huge pages; returns
/// when it does not, or when it cannot (said on standard error: the heap then stays on
/// 4 KiB pages, and the role runs as before).
pub fn execute_again_with_huge_pages() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let thp_mode = std::fs::read_to_string(THP_MODE).ok();
    if !gains_by_executing_again(
        std::env::var_os(TUNABLES).as_deref(),
        std::env::var_os(EXECUTED_AGAIN).as_deref(),
        thp_mode.as_deref(),
    ) {
        return;
    }
    let error = execute_again();
    eprintln!(
        "multiarch: cannot execute again with {TUNABLES}={HUGE_PAGES} ({error}); the heap stays on 4 KiB pages"
    );
}

#[cfg(unix)]
fn execute_again() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new("/proc/self/exe");
    if let Some(name) = args.next() {
        command.arg0(name);
    }
    // `exec` returns only when it failed; on success this process is the new one.
    command
        .args(args)
        .env(TUNABLES, HUGE_PAGES)
        .env(EXECUTED_AGAIN, "1")
        .exec()
}

#[cfg(not(unix))]
fn execute_again() -> std::io::Error {
    std::io::Error::other("not a Unix system")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executes_again_only_when_that_gains_huge_pages() {
        let set = Some(OsStr::new("glibc.malloc.arena_max=2"));
        let empty = Some(OsStr::new(""));
        let again = Some(OsStr::new("1"));
        let madvise = Some("always [madvise] never\n");
        for (tunables, executed_again, mode, gains) in [
            (None, None, madvise, true),
            // The user's tunables, even none, are kept.
            (set, None, madvise, false),
            (empty, None, madvise, false),
            // Never twice, even when glibc dropped the tunables.
            (None, again, madvise, false),
            // The heap has them already, cannot have them, or the kernel does not say.
            (None, None, Some("[always] madvise never\n"), false),
            (None, None, Some("always madvise [never]\n"), false),
            (None, None, None, false),
        ] {
            assert_eq!(
                gains_by_executing_again(tunables, executed_again, mode),
                gains,
                "{tunables:?} {executed_again:?} {mode:?}"
            );
        }
    }
}
