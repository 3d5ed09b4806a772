//! The kernel program in a real kernel: load, attach, exec a binary built for another
//! architecture, and read the event. Needs root (or CAP_BPF + CAP_PERFMON) and a kernel with
//! BTF; where the kernel refuses, the test says so on stderr ("SKIPPED: ...") instead of
//! passing silently. A binary built without the program fails here.
#![allow(clippy::unwrap_used)]

use std::{io::Write, os::unix::fs::PermissionsExt, path::Path, process::Command, time::Duration};

use multiarch_ebpf::{
    event::{ExecEvent, ExecSyscall},
    probe::{ExecProbe, ProbeError},
};

/// `e_machine` of an ELF file is the u16 at offset 18.
const E_MACHINE: usize = 18;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// A copy of /bin/true whose ELF header claims another CPU: the kernel refuses to exec it
/// with ENOEXEC, exactly as for an image built for the wrong architecture.
fn foreign_binary(dir: &Path) -> std::path::PathBuf {
    let mut elf = std::fs::read("/bin/true").unwrap();
    assert_eq!(&elf[..4], b"\x7fELF");
    let native = u16::from_le_bytes([elf[E_MACHINE], elf[E_MACHINE + 1]]);
    let foreign = if native == EM_AARCH64 {
        EM_X86_64
    } else {
        EM_AARCH64
    };
    elf[E_MACHINE..E_MACHINE + 2].copy_from_slice(&foreign.to_le_bytes());
    let path = dir.join("foreign-true");
    std::fs::write(&path, elf).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// Says why a test did not run, past libtest's output capture (which only catches the
/// print macros), or fails it where the kernel tests are required (scripts/test as root).
fn skip(why: &str) {
    assert!(
        std::env::var_os("MULTIARCH_REQUIRE_KERNEL_TESTS").is_none(),
        "kernel tests are required here: {why}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

fn attach_or_explain() -> Option<ExecProbe> {
    match ExecProbe::attach() {
        Ok(probe) => Some(probe),
        Err(e @ ProbeError::NotBuilt) => panic!("{e}"),
        Err(e) => {
            skip(&format!("the kernel refused the eBPF program: {e}"));
            None
        }
    }
}

async fn wait_for(probe: &mut ExecProbe, wanted: impl Fn(&ExecEvent) -> bool) -> ExecEvent {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            for event in probe.next_batch().await.unwrap() {
                let event = event.unwrap();
                if wanted(&event) {
                    return event;
                }
            }
        }
    })
    .await
    .expect("no ENOEXEC event within 10 s")
}

#[tokio::test]
async fn a_foreign_binary_is_reported_with_its_pid_and_filename() {
    let Some(mut probe) = attach_or_explain() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let binary = foreign_binary(dir.path());

    // The shell prints its pid, then execs the binary in place (execve in that same pid).
    let output = Command::new("/bin/sh")
        .arg("-c")
        .arg("echo $$; exec \"$0\"")
        .arg(&binary)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("Exec format error") || stderr.contains("cannot execute"),
        "{stderr}"
    );
    let shell_pid: u32 = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let filename = binary.to_str().unwrap().to_owned();
    let event = wait_for(&mut probe, |e| {
        e.filename.as_deref() == Some(filename.as_str())
    })
    .await;
    assert_eq!(event.tgid, shell_pid);
    assert_eq!(event.pid, shell_pid);
    assert_eq!(event.ppid, std::process::id());
    assert_eq!(event.ret, -8);
    assert_eq!(event.syscall, ExecSyscall::Execve);
    assert_eq!(event.comm, "sh");
    assert_eq!(probe.lost_events(), 0);
}

#[tokio::test]
async fn successful_and_other_failed_execs_are_not_reported() {
    let Some(mut probe) = attach_or_explain() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let binary = foreign_binary(dir.path());
    // ENOENT and a successful exec first, then the foreign binary as a marker: the marker
    // must be the first event about our files.
    let missing = dir.path().join("missing");
    assert!(Command::new(&missing).status().is_err());
    assert!(Command::new("/bin/true").status().unwrap().success());
    assert!(Command::new(&binary).status().is_err());

    let dir_name = dir.path().to_str().unwrap().to_owned();
    let event = wait_for(&mut probe, |e| {
        e.filename
            .as_deref()
            .is_some_and(|f| f.starts_with(&dir_name))
    })
    .await;
    assert_eq!(event.filename.as_deref(), binary.to_str());
}

#[tokio::test]
async fn execveat_on_a_file_descriptor_is_reported_too() {
    let Some(mut probe) = attach_or_explain() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let binary = foreign_binary(dir.path());
    // Python's os.execve with a file descriptor is fexecve: execveat(fd, "", AT_EMPTY_PATH).
    let script = "import os,sys; print(os.getpid(), flush=True); fd=os.open(sys.argv[1], os.O_RDONLY); os.execve(fd, ['foreign'], {})";
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(&binary)
        .output();
    let Ok(output) = output else {
        skip("python3 is not installed, execveat not exercised");
        return;
    };
    assert!(!output.status.success());
    let python_pid: u32 = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let event = wait_for(&mut probe, |e| e.tgid == python_pid).await;
    assert_eq!(event.syscall, ExecSyscall::Execveat);
    assert_eq!(event.filename.as_deref(), Some(""));
}

/// The pid a shell prints before it exits with `status`.
fn shell_exiting_with(status: u8) -> u32 {
    let output = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("echo $$; exit {status}"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(i32::from(status)));
    String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn an_exit_with_the_loaders_status_is_reported_and_others_are_not() {
    let Some(mut probe) = attach_or_explain() else {
        return;
    };
    // Other statuses first, then 127 as the marker: the marker must be the first
    // exit_group event of these shells.
    let others = [
        shell_exiting_with(0),
        shell_exiting_with(1),
        shell_exiting_with(126),
    ];
    let loader = shell_exiting_with(127);
    let event = wait_for(&mut probe, |e| {
        e.syscall == ExecSyscall::ExitGroup && (e.tgid == loader || others.contains(&e.tgid))
    })
    .await;
    assert_eq!(event.tgid, loader);
    assert_eq!(event.ret, 127);
    assert_eq!(event.comm, "sh");
    assert_eq!(event.filename, None);
    assert_eq!(event.ppid, std::process::id());
}
