//! What image inspection needs of a pod: its containers' images (init containers first,
//! as the kubelet pulls them) and where their pull credentials are. Read the same way by
//! the scheduler's model, the webhook, the gate controller and the audit.

use k8s_openapi::api::core::v1::{Pod, PodSpec};

/// One container's image.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerImage {
    pub container: String,
    pub image: String,
    /// `imagePullPolicy: Always`: the tag may have moved, so a cached answer is not enough.
    pub pull_always: bool,
}

/// Where a pod's image pull credentials are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PullCredentials<'a> {
    pub namespace: &'a str,
    pub pull_secrets: &'a [String],
    pub service_account: Option<&'a str>,
}

/// A pod's images and their credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodImages {
    pub namespace: String,
    pub pull_secrets: Vec<String>,
    pub service_account: Option<String>,
    pub images: Vec<ContainerImage>,
}

impl PodImages {
    pub fn of(pod: &Pod) -> Self {
        let empty = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&empty);
        PodImages {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            pull_secrets: pull_secret_names(spec),
            service_account: service_account(spec),
            images: container_images(spec),
        }
    }

    pub fn credentials(&self) -> PullCredentials<'_> {
        PullCredentials {
            namespace: &self.namespace,
            pull_secrets: &self.pull_secrets,
            service_account: self.service_account.as_deref(),
        }
    }
}

/// Every init container's and container's image (ephemeral containers are never
/// scheduled on).
pub fn container_images(spec: &PodSpec) -> Vec<ContainerImage> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter_map(|c| {
            c.image.as_ref().map(|image| ContainerImage {
                container: c.name.clone(),
                image: image.clone(),
                pull_always: c.image_pull_policy.as_deref() == Some("Always")
                    || (c.image_pull_policy.is_none() && image_defaults_to_always(image)),
            })
        })
        .collect()
}

/// The most pull secrets (the pod's and its service account's, distinct) whose
/// credentials are read for one pod. A pod may name any number; the inspector refuses
/// more than this, naming the limit, rather than read them all.
pub const MAX_PULL_SECRETS: usize = 100;

/// The distinct names of the pod's `imagePullSecrets`, in their order (empty references
/// and repeats skipped), at most one more than [`MAX_PULL_SECRETS`]: enough for the
/// inspector to see that there are too many, never a pod's whole list copied.
pub fn pull_secret_names(spec: &PodSpec) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    spec.image_pull_secrets
        .iter()
        .flatten()
        .map(|r| r.name.as_str())
        .filter(|n| !n.is_empty() && seen.insert(*n))
        .take(MAX_PULL_SECRETS + 1)
        .map(str::to_owned)
        .collect()
}

/// The pod's service account, when it names one.
pub fn service_account(spec: &PodSpec) -> Option<String> {
    spec.service_account_name.clone().filter(|s| !s.is_empty())
}

/// The API server's default pull policy: `Always` for `:latest` and untagged images.
fn image_defaults_to_always(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        None => true,
        Some((_, tag)) => tag == "latest",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn images_init_containers_first_with_the_api_servers_pull_policy() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "team"},
            "spec": {
                "serviceAccountName": "builder",
                "imagePullSecrets": [{"name": "pull"}, {"name": ""}],
                "initContainers": [{"name": "init", "image": "r/init@sha256:aa"}],
                "containers": [
                    {"name": "app", "image": "r/app:1.0"},
                    {"name": "latest", "image": "r/app"},
                    {"name": "forced", "image": "r/app:1.0", "imagePullPolicy": "Always"},
                    {"name": "never", "image": "r/app:latest", "imagePullPolicy": "IfNotPresent"},
                ],
            },
        }))
        .unwrap();
        let read = PodImages::of(&pod);
        let images: Vec<(&str, bool)> = read
            .images
            .iter()
            .map(|i| (i.container.as_str(), i.pull_always))
            .collect();
        assert_eq!(
            images,
            [
                ("init", false),
                ("app", false),
                ("latest", true),
                ("forced", true),
                ("never", false)
            ]
        );
        assert_eq!(
            read.credentials(),
            PullCredentials {
                namespace: "team",
                pull_secrets: &["pull".to_owned()],
                service_account: Some("builder"),
            }
        );
    }

    #[test]
    fn pull_secrets_are_read_once_each_and_never_more_than_the_limit_and_one() {
        let names = |list: Vec<String>| {
            let spec: PodSpec = serde_json::from_value(json!({"containers": [],
                "imagePullSecrets": list.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()}))
            .unwrap();
            pull_secret_names(&spec)
        };
        assert_eq!(
            names(vec![
                "b".into(),
                "a".into(),
                "b".into(),
                String::new(),
                "a".into()
            ]),
            ["b", "a"]
        );
        let many = names((0..100_000).map(|i| format!("s{}", i % 50_000)).collect());
        assert_eq!(many.len(), MAX_PULL_SECRETS + 1);
        assert_eq!(many[0], "s0");
        assert_eq!(many[MAX_PULL_SECRETS], "s100");
    }
}
