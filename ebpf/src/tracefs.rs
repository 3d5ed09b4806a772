//! Tracepoints are found through tracefs; a node (or a container with only `/sys` mounted)
//! may not have it mounted yet.

use std::path::{Path, PathBuf};

/// Where aya looks for tracefs, in its order.
const MOUNT_POINTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error(
        "tracefs is not mounted and mounting it at {path} failed: {source} (the daemon needs CAP_SYS_ADMIN to mount it, or mount tracefs on the host and pass /sys/kernel/tracing in)"
    )]
    Mount {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn is_mounted(path: &Path) -> bool {
    path.join("events").is_dir()
}

/// Makes sure tracefs is available, mounting it at `/sys/kernel/tracing` when it is not.
/// Returns the path in use.
pub fn ensure_mounted() -> Result<PathBuf, TracefsError> {
    if let Some(found) = MOUNT_POINTS.iter().map(Path::new).find(|p| is_mounted(p)) {
        return Ok(found.to_path_buf());
    }
    let path = PathBuf::from(MOUNT_POINTS[0]);
    rustix::mount::mount(
        "nodev",
        &path,
        "tracefs",
        rustix::mount::MountFlags::empty(),
        None,
    )
    .map_err(|e| TracefsError::Mount {
        path: path.clone(),
        source: e.into(),
    })?;
    tracing::info!(path = %path.display(), "mounted tracefs");
    Ok(path)
}
