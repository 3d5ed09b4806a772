//! Loads the kernel program, attaches it to the exec and exit_group tracepoints and reads
//! its events.

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, RingBuf},
    programs::{ProgramError, TracePoint},
};
use tokio::io::unix::AsyncFd;

use crate::event::{DecodeError, ExecEvent};
use crate::tracefs::{self, TracefsError};

/// The compiled kernel program; empty when clang was missing at build time (see build.rs).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/enoexec.bpf.o"));

/// The programs in the object and the tracepoint each one attaches to.
pub const PROGRAMS: [(&str, &str); 5] = [
    ("enter_execve", "sys_enter_execve"),
    ("enter_execveat", "sys_enter_execveat"),
    ("exit_execve", "sys_exit_execve"),
    ("exit_execveat", "sys_exit_execveat"),
    ("enter_exit_group", "sys_enter_exit_group"),
];
const EVENTS_MAP: &str = "events";
const LOST_MAP: &str = "lost_events";

/// The compiled object, if this binary carries one.
pub fn object() -> Option<&'static [u8]> {
    (!OBJECT.is_empty()).then_some(OBJECT)
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "this binary was built without the eBPF program (clang was not found at build time); rebuild with clang and libbpf-dev installed"
    )]
    NotBuilt,
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    #[error(
        "loading the eBPF program failed (the daemon needs CAP_BPF and CAP_PERFMON, or root, a kernel >= 5.8 with BTF at /sys/kernel/btf/vmlinux, and on kernels before 5.11, which charge eBPF maps to RLIMIT_MEMLOCK, CAP_SYS_RESOURCE: the operator's --enoexec-daemon-sys-resource)"
    )]
    Load(#[source] aya::EbpfError),
    #[error("the eBPF object has no {0}")]
    Missing(&'static str),
    #[error("attaching {program} to syscalls/{tracepoint} failed")]
    Attach {
        program: &'static str,
        tracepoint: &'static str,
        source: ProgramError,
    },
    #[error("opening the {map} map failed")]
    Map {
        map: &'static str,
        source: aya::maps::MapError,
    },
    #[error("waiting for ring buffer events failed")]
    Poll(#[source] std::io::Error),
}

/// The attached program. Dropping it detaches the tracepoints.
pub struct ExecProbe {
    events: AsyncFd<RingBuf<MapData>>,
    lost: Array<MapData, u64>,
    // Owns the programs and their links; kept alive for as long as the probe.
    _ebpf: Ebpf,
}

impl ExecProbe {
    /// Mounts tracefs if needed, loads the program and attaches it to the four exec
    /// tracepoints and exit_group's. Must run in a tokio runtime (the ring buffer is polled through epoll).
    pub fn attach() -> Result<Self, ProbeError> {
        let object = object().ok_or(ProbeError::NotBuilt)?;
        tracefs::ensure_mounted()?;
        raise_memlock_limit();
        let mut ebpf = EbpfLoader::new().load(object).map_err(ProbeError::Load)?;
        for (program, tracepoint) in PROGRAMS {
            let attach_error = |source| ProbeError::Attach {
                program,
                tracepoint,
                source,
            };
            let tp: &mut TracePoint = ebpf
                .program_mut(program)
                .ok_or(ProbeError::Missing(program))?
                .try_into()
                .map_err(attach_error)?;
            tp.load().map_err(attach_error)?;
            tp.attach("syscalls", tracepoint).map_err(attach_error)?;
        }
        let map_error = |map| move |source| ProbeError::Map { map, source };
        let events = RingBuf::try_from(
            ebpf.take_map(EVENTS_MAP)
                .ok_or(ProbeError::Missing(EVENTS_MAP))?,
        )
        .map_err(map_error(EVENTS_MAP))?;
        let lost = Array::try_from(
            ebpf.take_map(LOST_MAP)
                .ok_or(ProbeError::Missing(LOST_MAP))?,
        )
        .map_err(map_error(LOST_MAP))?;
        // SAFETY: the ring buffer owns its map's file descriptor and the AsyncFd owns the
        // ring buffer, so the descriptor stays open, and `as_raw_fd` keeps returning it, for
        // as long as it is registered.
        #[allow(unsafe_code)]
        let events = unsafe { AsyncFd::register(events) }
            .map_err(|e| ProbeError::Poll(std::io::Error::from(e)))?;
        Ok(Self {
            events,
            lost,
            _ebpf: ebpf,
        })
    }

    /// Waits for the next records and returns them decoded, with the records that could not
    /// be decoded (a program/loader mismatch, reported rather than dropped silently).
    pub async fn next_batch(&mut self) -> Result<Vec<Result<ExecEvent, DecodeError>>, ProbeError> {
        loop {
            let mut guard = self.events.readable_mut().await.map_err(ProbeError::Poll)?;
            let ring = guard.get_inner_mut();
            let mut batch = Vec::new();
            while let Some(item) = ring.next() {
                batch.push(ExecEvent::decode(&item));
            }
            guard.clear_ready();
            if !batch.is_empty() {
                return Ok(batch);
            }
        }
    }

    /// Events the kernel program dropped because the ring buffer was full.
    pub fn lost_events(&self) -> u64 {
        self.lost.get(&0, 0).unwrap_or(0)
    }
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK; later ones ignore it. Failing to
/// raise it is not fatal: loading reports the real error if the limit matters.
fn raise_memlock_limit() {
    let unlimited = rustix::process::Rlimit {
        current: None,
        maximum: None,
    };
    if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::Memlock, unlimited) {
        tracing::debug!(error = %e, "could not raise RLIMIT_MEMLOCK");
    }
}
