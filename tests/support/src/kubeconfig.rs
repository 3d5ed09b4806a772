//! A kubeconfig file that points a `multiarch` process at the fake API server.

use std::path::{Path, PathBuf};

use multiarch_fake_apiserver::FakeApiServer;

/// Writes `dir/kubeconfig` for `server` (no credentials) and returns its path.
pub fn kubeconfig(dir: &Path, server: &FakeApiServer) -> PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\ncurrent-context: fake\nusers:\n- name: fake\n  user: {{}}\n",
            server.url()
        ),
    )
    .unwrap();
    path
}
