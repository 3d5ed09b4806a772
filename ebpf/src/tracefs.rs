//! Tracepoints are found through tracefs; a node (or a container with only `/sys` mounted)
//! may not have it mounted yet.

use std::path::{Path, PathBuf};

/// Where aya looks for tracefs, in its order.
const MOUNT_POINTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error(
        "tracefs is not mounted and mounting it at {path} failed (the daemon needs CAP_SYS_ADMIN to mount it, or mount the host's /sys/kernel/tracing into the container)"
    )]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read tracefs at {path} (the daemon needs to run as root)")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Whether tracefs is mounted at `path`; an error when it is there but unreadable.
fn is_mounted(path: &Path) -> Result<bool, TracefsError> {
    match std::fs::metadata(path.join("events")) {
        Ok(m) => Ok(m.is_dir()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Err(TracefsError::Unreadable {
                path: path.to_path_buf(),
                source: e,
            })
        }
        Err(_) => Ok(false),
    }
}

/// Makes sure tracefs is available, mounting it at `/sys/kernel/tracing` when it is not.
/// Returns the path in use.
pub fn ensure_mounted() -> Result<PathBuf, TracefsError> {
    for path in MOUNT_POINTS.iter().map(Path::new) {
        if is_mounted(path)? {
            return Ok(path.to_path_buf());
        }
    }
    let path = PathBuf::from(MOUNT_POINTS[0]);
    match rustix::mount::mount(
        "nodev",
        &path,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    ) {
        Ok(()) => tracing::info!(path = %path.display(), "mounted tracefs"),
        // Another process (or thread) mounted it between the check and the mount.
        Err(_) if is_mounted(&path)? => {}
        Err(e) => {
            return Err(TracefsError::Mount {
                path,
                source: e.into(),
            });
        }
    }
    Ok(path)
}
