//! The kube-apiserver 1.36.2 of the kit in `../shared/k8s` (etcd and the API server alone),
//! for tests whose answer only the real server has: admission policies, the bench's runs.
//! Each test picks its own SLOT, so tests of several binaries never share a server.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// The kit's directory and its binaries, or why not (the caller prints `SKIPPED: ...`).
pub fn find() -> Result<(PathBuf, PathBuf), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let kit = std::env::var_os("MULTIARCH_K8S_KIT")
        .map(PathBuf::from)
        .into_iter()
        .chain([
            root.join("../shared/k8s"),
            PathBuf::from("/work/shared/k8s"),
        ])
        .find(|k| k.join("cluster").is_file())
        .ok_or("no Kubernetes kit (../shared/k8s; set MULTIARCH_K8S_KIT)")?;
    let bin = std::env::var_os("K8S_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/multiarch-k8s/v1.36.2")
        });
    for binary in ["etcd", "kube-apiserver", "kubectl"] {
        if !bin.join(binary).is_file() {
            return Err(format!(
                "the kit's binaries are not built ({binary} missing in {})",
                bin.display()
            ));
        }
    }
    Ok((kit, bin))
}

/// The kit's API server, brought down when dropped (whatever the test did).
pub struct ApiServer {
    kit: PathBuf,
    dir: PathBuf,
    bin: PathBuf,
    slot: &'static str,
}

impl ApiServer {
    /// Starts etcd and kube-apiserver in `dir` on the kit's `slot`.
    pub fn up(kit: &Path, bin: &Path, dir: &Path, slot: &'static str) -> Self {
        let server = ApiServer {
            kit: kit.to_owned(),
            dir: dir.to_owned(),
            bin: bin.to_owned(),
            slot,
        };
        let out = Command::new(kit.join("cluster"))
            .arg("up")
            .arg(dir)
            .env("SLOT", slot)
            .env("K8S_BIN", bin)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster up: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        server
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// `kubectl ARGS` with the admin's kubeconfig.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(&self.kubeconfig(), args)
    }

    /// `kubectl ARGS` with another kubeconfig (one that impersonates, say).
    pub fn kubectl_with(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        Command::new(self.bin.join("kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .output()
            .unwrap()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = Command::new(self.kit.join("cluster"))
            .arg("down")
            .arg(&self.dir)
            .env("SLOT", self.slot)
            .env("K8S_BIN", &self.bin)
            .output();
    }
}
