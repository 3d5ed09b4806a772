//! Exec-format-error detection on nodes (`multiarch enoexec-daemon`).
//!
//! - [`probe`]: the kernel program (`bpf/enoexec.bpf.c`, compiled by build.rs) on the
//!   `syscalls/sys_{enter,exit}_{execve,execveat}` tracepoints, loaded with aya; it reports
//!   every exec that fails with `ENOEXEC` as an [`event::ExecEvent`].
//! - [`cgroup`], [`cgroup_id`]: which container a process belongs to, from
//!   `/proc/PID/cgroup` (cgroup v1 and v2, systemd and cgroupfs drivers, containerd and
//!   CRI-O) or from the kernel's cgroup id when the process is already gone.
//! - [`cri`]: the container's pod, from the CRI `runtime.v1` API on the runtime's socket.
//!   [`cri_socket`]: where that socket is.
//! - [`locate`]: the three put together: an event to a container of a pod, or "not in a
//!   Kubernetes container".

pub mod cgroup;
pub mod cgroup_id;
pub mod cri;
pub mod cri_socket;
pub mod event;
pub mod locate;
pub mod probe;
pub mod tracefs;
