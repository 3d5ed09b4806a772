//! The Kubernetes client of every role: from a kubeconfig file when one is given, else
//! `KUBECONFIG`, `~/.kube/config` or the in-cluster service account; with deadlines so
//! that an unreachable or hung API server is an error, not a hang: on connecting, on each
//! request but watches (`MULTIARCH_KUBE_API_TIMEOUT_SECONDS`, default 60), and on a
//! connection that stops sending.

use std::{path::Path, time::Duration};

use crate::request_deadline::RequestDeadlineLayer;

/// How long a connection to the API server may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request (but a watch) may wait for its answer, unless
/// `MULTIARCH_KUBE_API_TIMEOUT_SECONDS` says otherwise.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an open connection may stay silent while a response is read; longer than
/// the API server's watch timeout (290 s at most, with bookmarks in between).
pub const READ_TIMEOUT: Duration = Duration::from_secs(295);

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
    #[error("MULTIARCH_KUBE_API_TIMEOUT_SECONDS must be a positive number of seconds, not {0:?}")]
    Timeout(String),
}

/// The per-request deadline: `MULTIARCH_KUBE_API_TIMEOUT_SECONDS` or [`REQUEST_TIMEOUT`].
fn request_timeout(setting: Option<&str>) -> Result<Duration, ClientError> {
    match setting {
        None => Ok(REQUEST_TIMEOUT),
        Some(value) => match value.trim().parse::<u64>() {
            Ok(seconds) if seconds > 0 => Ok(Duration::from_secs(seconds)),
            _ => Err(ClientError::Timeout(value.to_owned())),
        },
    }
}

/// A client for the cluster `kubeconfig` names, or the one the environment names.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    build(configure(kubeconfig).await?)
}

/// The same client without kube's retries of 429, 503 and 504: for the Eviction API,
/// whose 429 is a PodDisruptionBudget's refusal the caller must see at once (retried,
/// it would hold the caller for minutes and hammer the API server meanwhile).
pub async fn connect_without_retries(
    kubeconfig: Option<&Path>,
) -> Result<kube::Client, ClientError> {
    let mut config = configure(kubeconfig).await?;
    config.default_retry = false;
    build(config)
}

fn build(config: kube::Config) -> Result<kube::Client, ClientError> {
    let deadline = request_timeout(
        std::env::var("MULTIARCH_KUBE_API_TIMEOUT_SECONDS")
            .ok()
            .as_deref(),
    )?;
    Ok(with_request_deadline(config, deadline)?)
}

async fn configure(kubeconfig: Option<&Path>) -> Result<kube::Config, ClientError> {
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
    config.read_timeout = Some(READ_TIMEOUT);
    // The read timeout counts from the last request written, not from when a pooled
    // connection went idle.
    config.reset_reader_on_write = true;
    Ok(config)
}

/// A client for `config` whose requests (but watches) fail after `deadline`.
pub fn with_request_deadline(
    config: kube::Config,
    deadline: Duration,
) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&RequestDeadlineLayer::new(deadline))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_timeout_is_read_from_the_environment_value() {
        assert_eq!(request_timeout(None).unwrap(), REQUEST_TIMEOUT);
        assert_eq!(request_timeout(Some("5")).unwrap(), Duration::from_secs(5));
        for bad in ["0", "-1", "5s", ""] {
            assert_eq!(
                request_timeout(Some(bad)).unwrap_err().to_string(),
                format!(
                    "MULTIARCH_KUBE_API_TIMEOUT_SECONDS must be a positive number of seconds, not {bad:?}"
                )
            );
        }
    }

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
