//! A cgroup v2 id (what the kernel program reads with `bpf_get_current_cgroup_id`) back to
//! its path. A container whose entrypoint fails to exec exits at once, often before the
//! daemon reads `/proc/PID/cgroup`; its cgroup usually lives a little longer, and on cgroup
//! v2 a cgroup's id is the inode number of its directory.

use std::{
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

/// Deep enough for kubepods/qos/pod/container under a nested (kind, systemd) root.
const MAX_DEPTH: usize = 12;

/// The cgroup v2 hierarchy under a cgroup mount point (`/sys/fs/cgroup`, or where the
/// host's is mounted): the mount itself on unified hosts, its `unified` child on hybrid
/// ones, or none (cgroup v1 only: the kernel program then reports id 0 or 1).
pub fn v2_root(base: &Path) -> Option<PathBuf> {
    [base.to_path_buf(), base.join("unified")]
        .into_iter()
        .find(|p| p.join("cgroup.controllers").is_file())
}

/// The path, relative to `root` and starting with `/`, of the cgroup whose id is `id`.
pub fn path_of(root: &Path, id: u64) -> Option<String> {
    // Ids 0 and 1 are "no cgroup v2" and the root itself: never a container.
    if id <= 1 {
        return None;
    }
    // Inode numbers are per file system: never follow into another mount.
    let device = std::fs::metadata(root).ok()?.dev();
    let found = find(root, device, id, 0)?;
    let relative = found.strip_prefix(root).ok()?;
    Some(format!("/{}", relative.display()))
}

fn find(dir: &Path, device: u64, id: u64, depth: usize) -> Option<PathBuf> {
    if depth > MAX_DEPTH {
        return None;
    }
    let entries = std::fs::read_dir(dir).ok()?;
    let mut children = Vec::new();
    for entry in entries.flatten() {
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if !file_type.is_dir() {
            continue;
        }
        let Ok(metadata) = entry.metadata() else {
            continue;
        };
        if metadata.dev() != device {
            continue;
        }
        if metadata.ino() == id {
            return Some(entry.path());
        }
        children.push(entry.path());
    }
    children
        .into_iter()
        .find_map(|child| find(&child, device, id, depth + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_nested_directory_by_inode() {
        let root = tempfile::tempdir().unwrap();
        let deep = root
            .path()
            .join("kubepods.slice/kubepods-pod1.slice/crio-abc.scope");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(root.path().join("system.slice/sshd.service")).unwrap();
        let id = std::fs::metadata(&deep).unwrap().ino();
        assert_eq!(
            path_of(root.path(), id).as_deref(),
            Some("/kubepods.slice/kubepods-pod1.slice/crio-abc.scope")
        );
    }

    #[test]
    fn the_v2_hierarchy_is_found_on_unified_and_hybrid_hosts() {
        let unified = tempfile::tempdir().unwrap();
        std::fs::write(unified.path().join("cgroup.controllers"), "cpu memory").unwrap();
        assert_eq!(v2_root(unified.path()).as_deref(), Some(unified.path()));
        let hybrid = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(hybrid.path().join("memory")).unwrap();
        std::fs::create_dir_all(hybrid.path().join("unified")).unwrap();
        std::fs::write(hybrid.path().join("unified/cgroup.controllers"), "").unwrap();
        assert_eq!(v2_root(hybrid.path()), Some(hybrid.path().join("unified")));
        let v1_only = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(v1_only.path().join("memory")).unwrap();
        assert_eq!(v2_root(v1_only.path()), None);
    }

    #[test]
    fn unknown_and_reserved_ids_find_nothing() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("a/b")).unwrap();
        assert_eq!(path_of(root.path(), 0), None);
        assert_eq!(path_of(root.path(), 1), None);
        assert_eq!(path_of(root.path(), u64::MAX), None);
        assert_eq!(path_of(Path::new("/nonexistent/cgroup"), 12345), None);
    }
}
