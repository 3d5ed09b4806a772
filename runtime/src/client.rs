//! The Kubernetes client of every role: from a kubeconfig file when one is given, else
//! `KUBECONFIG`, `~/.kube/config` or the in-cluster service account; with a deadline on
//! connecting so that an unreachable API server is an error, not a hang.

use std::{path::Path, time::Duration};

/// How long a connection to the API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("no kubeconfig and not in a cluster: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("cannot build the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// A client for the cluster `kubeconfig` names, or the one the environment names.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let error = |source| ClientError::Kubeconfig {
                path: path.display().to_string(),
                source,
            };
            let file = kube::config::Kubeconfig::read_from(path).map_err(error)?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(error)?
        }
        None => kube::Config::infer().await?,
    };
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    Ok(kube::Client::try_from(config)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_kubeconfig_names_the_file() {
        let Err(error) = connect(Some(Path::new("/nonexistent/kubeconfig"))).await else {
            panic!("a missing file gave a client");
        };
        assert!(
            error
                .to_string()
                .starts_with("cannot read kubeconfig /nonexistent/kubeconfig"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_kubeconfig_file_gives_a_client_with_a_connect_deadline() {
        let dir = std::env::temp_dir().join(format!("multiarch-client-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n\
             users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
        )
        .unwrap();
        let client = connect(Some(&path)).await.unwrap();
        // Nothing listens on port 9: the request fails instead of hanging.
        let answer = tokio::time::timeout(
            CONNECT_TIMEOUT + Duration::from_secs(5),
            client.apiserver_version(),
        )
        .await;
        assert!(matches!(answer, Ok(Err(_))), "{answer:?}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
