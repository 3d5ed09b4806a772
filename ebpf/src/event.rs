//! The record the kernel program writes into the ring buffer for each failed exec, and for
//! each process that exits with the loader's failure status 127 (`struct exec_event` in
//! `bpf/enoexec.bpf.c`), decoded without `unsafe`.

/// Size in bytes of `struct exec_event`.
pub const EVENT_SIZE: usize = 304;
const COMM_LEN: usize = 16;
const FILENAME_LEN: usize = 256;
const FLAG_FILENAME_MISSING: u32 = 1;

/// Which system call the record is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecSyscall {
    /// `execve` failed with `ENOEXEC`.
    Execve,
    /// `execveat` failed with `ENOEXEC`.
    Execveat,
    /// The process called `exit_group(127)`: how glibc's loader ends a program it refuses
    /// to start (and a shell a command it cannot find: the container's log tells which).
    ExitGroup,
}

/// One `exec` that the kernel refused with `ENOEXEC`, or one process exiting with 127.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecEvent {
    /// The thread that called exec.
    pub pid: u32,
    /// Its process (thread group) id: the pid `/proc` knows it by.
    pub tgid: u32,
    /// The parent process, which usually outlives a container's failed entrypoint.
    pub ppid: u32,
    /// The exec's return value (`-ENOEXEC`), or the exit status (127).
    pub ret: i32,
    /// The cgroup v2 id of the caller (0 on a host without the unified hierarchy).
    pub cgroup_id: u64,
    pub syscall: ExecSyscall,
    /// The caller's command name before the exec.
    pub comm: String,
    /// The path passed to exec, when the kernel program could read it.
    pub filename: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("event record has {0} bytes, expected {EVENT_SIZE}")]
    Size(usize),
    #[error("event record names unknown syscall {0}")]
    Syscall(u32),
}

impl ExecEvent {
    /// Decodes one ring-buffer record (native byte order: the kernel wrote it on this host).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let record: &[u8; EVENT_SIZE] = bytes
            .try_into()
            .map_err(|_| DecodeError::Size(bytes.len()))?;
        let u32_at = |at: usize| {
            u32::from_ne_bytes([record[at], record[at + 1], record[at + 2], record[at + 3]])
        };
        let mut cgroup = [0u8; 8];
        cgroup.copy_from_slice(&record[16..24]);
        let syscall = match u32_at(24) {
            0 => ExecSyscall::Execve,
            1 => ExecSyscall::Execveat,
            2 => ExecSyscall::ExitGroup,
            other => return Err(DecodeError::Syscall(other)),
        };
        let flags = u32_at(28);
        let comm = c_string(&record[32..32 + COMM_LEN]);
        let filename =
            (flags & FLAG_FILENAME_MISSING == 0).then(|| c_string(&record[48..48 + FILENAME_LEN]));
        Ok(Self {
            pid: u32_at(0),
            tgid: u32_at(4),
            ppid: u32_at(8),
            ret: i32::from_ne_bytes(u32_at(12).to_ne_bytes()),
            cgroup_id: u64::from_ne_bytes(cgroup),
            syscall,
            comm,
            filename,
        })
    }

    /// Encodes the record as the kernel program does; for tests and the simulator.
    pub fn encode(&self) -> [u8; EVENT_SIZE] {
        let mut record = [0u8; EVENT_SIZE];
        record[0..4].copy_from_slice(&self.pid.to_ne_bytes());
        record[4..8].copy_from_slice(&self.tgid.to_ne_bytes());
        record[8..12].copy_from_slice(&self.ppid.to_ne_bytes());
        record[12..16].copy_from_slice(&self.ret.to_ne_bytes());
        record[16..24].copy_from_slice(&self.cgroup_id.to_ne_bytes());
        let syscall: u32 = match self.syscall {
            ExecSyscall::Execve => 0,
            ExecSyscall::Execveat => 1,
            ExecSyscall::ExitGroup => 2,
        };
        record[24..28].copy_from_slice(&syscall.to_ne_bytes());
        let flags = if self.filename.is_none() {
            FLAG_FILENAME_MISSING
        } else {
            0
        };
        record[28..32].copy_from_slice(&flags.to_ne_bytes());
        copy_c_string(&mut record[32..32 + COMM_LEN], &self.comm);
        copy_c_string(
            &mut record[48..48 + FILENAME_LEN],
            self.filename.as_deref().unwrap_or(""),
        );
        record
    }
}

/// Bytes up to the first NUL; the kernel program truncates long strings, never errors.
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn copy_c_string(into: &mut [u8], text: &str) {
    let len = text.len().min(into.len() - 1);
    into[..len].copy_from_slice(&text.as_bytes()[..len]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ExecEvent {
        ExecEvent {
            pid: 4242,
            tgid: 4240,
            ppid: 17,
            ret: -8,
            cgroup_id: 0x1234_5678_9abc,
            syscall: ExecSyscall::Execveat,
            comm: "runc:[2:INIT]".into(),
            filename: Some("/usr/local/bin/app".into()),
        }
    }

    #[test]
    fn round_trips_through_the_kernel_layout() {
        let event = sample();
        assert_eq!(ExecEvent::decode(&event.encode()), Ok(event));
    }

    #[test]
    fn an_exit_with_the_loader_status_round_trips() {
        let event = ExecEvent {
            ret: 127,
            syscall: ExecSyscall::ExitGroup,
            filename: None,
            ..sample()
        };
        assert_eq!(ExecEvent::decode(&event.encode()), Ok(event));
    }

    #[test]
    fn a_missing_filename_stays_missing() {
        let event = ExecEvent {
            filename: None,
            ..sample()
        };
        let decoded = ExecEvent::decode(&event.encode()).unwrap();
        assert_eq!(decoded.filename, None);
    }

    #[test]
    fn strings_stop_at_the_first_nul_and_survive_invalid_utf8() {
        let mut record = sample().encode();
        record[32..36].copy_from_slice(b"a\xffb\0");
        record[36] = b'z'; // garbage after the NUL is ignored
        let decoded = ExecEvent::decode(&record).unwrap();
        assert_eq!(decoded.comm, "a\u{fffd}b");
    }

    #[test]
    fn a_full_length_filename_without_nul_is_kept_whole() {
        let mut record = sample().encode();
        record[48..48 + FILENAME_LEN].fill(b'x');
        let decoded = ExecEvent::decode(&record).unwrap();
        assert_eq!(decoded.filename.unwrap().len(), FILENAME_LEN);
    }

    #[test]
    fn rejects_records_of_the_wrong_size_or_syscall() {
        assert_eq!(ExecEvent::decode(&[0; 12]), Err(DecodeError::Size(12)));
        let mut record = sample().encode();
        record[24..28].copy_from_slice(&7u32.to_ne_bytes());
        assert_eq!(ExecEvent::decode(&record), Err(DecodeError::Syscall(7)));
    }
}
