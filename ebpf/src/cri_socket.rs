//! Where the node's container runtime listens: the socket given, or the first of the
//! common runtimes' defaults that exists.

use std::path::{Path, PathBuf};

/// containerd's, CRI-O's and k3s's (and RKE2's) default sockets, through the DaemonSet's
/// mount of the host's /run first, then as seen on the host itself.
pub const RUNTIME_SOCKETS: [&str; 6] = [
    "/host/run/containerd/containerd.sock",
    "/host/run/crio/crio.sock",
    "/host/run/k3s/containerd/containerd.sock",
    "/run/containerd/containerd.sock",
    "/var/run/crio/crio.sock",
    "/run/k3s/containerd/containerd.sock",
];

#[derive(Debug, thiserror::Error)]
#[error("no container runtime socket at {} (set --runtime-endpoint)", .tried.join(" or "))]
pub struct NoRuntimeSocket {
    pub tried: Vec<String>,
}

/// The socket of `endpoint` (`unix:///path` or a path), else the first of
/// [`RUNTIME_SOCKETS`] that exists.
pub fn runtime_socket(endpoint: Option<&str>) -> Result<PathBuf, NoRuntimeSocket> {
    first_socket(endpoint, &RUNTIME_SOCKETS)
}

fn first_socket(endpoint: Option<&str>, candidates: &[&str]) -> Result<PathBuf, NoRuntimeSocket> {
    if let Some(endpoint) = endpoint {
        return Ok(PathBuf::from(
            endpoint.strip_prefix("unix://").unwrap_or(endpoint),
        ));
    }
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| Path::exists(p))
        .ok_or_else(|| NoRuntimeSocket {
            tried: candidates.iter().map(|c| (*c).to_owned()).collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_wins_else_the_first_socket_that_exists() {
        assert_eq!(
            runtime_socket(Some("unix:///run/x.sock")).unwrap(),
            Path::new("/run/x.sock")
        );
        assert_eq!(
            runtime_socket(Some("/run/y.sock")).unwrap(),
            Path::new("/run/y.sock")
        );
        let dir = tempfile::tempdir().unwrap();
        let present = dir.path().join("crio.sock");
        std::fs::write(&present, "").unwrap();
        let absent = dir.path().join("containerd.sock");
        let (absent, present) = (absent.to_str().unwrap(), present.to_str().unwrap());
        assert_eq!(
            first_socket(None, &[absent, present]).unwrap(),
            Path::new(present)
        );
        let none = first_socket(None, &[absent]).unwrap_err();
        assert!(none.to_string().contains(absent), "{none}");
    }
}
