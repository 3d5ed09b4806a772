//! The image platforms of a pod at admission, with a deadline: the same inspector the
//! scheduler and the gate controller ask (its cache answers replicas of images already
//! seen in microseconds). A lookup that misses the deadline goes on in the background,
//! bounded, so the next replica finds the answer in the cache.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use multiarch_inspector::{ImageInspector, InspectRequest};
use multiarch_policy::{
    platform::{Platform, compatible_platforms_of},
    pod_images::PodImages,
};
use tokio::{sync::Semaphore, task::JoinSet};

/// How long a lookup may go on after admission gave up on it: the inspector's own
/// registry deadlines are shorter; this bounds a hung inspector.
const BACKGROUND_LIMIT: Duration = Duration::from_secs(60);

/// The answer within the deadline.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// The platforms every container can run on (empty: none in common).
    Platforms(Vec<Platform>),
    /// No image confines the pod: every one is an OLM bundle image (data, never run).
    Anywhere,
    TimedOut,
    Failed(String),
    Busy,
}

/// Whose credentials a lookup at admission may use. The webhook cannot tell a review
/// sent by the API server from one any pod crafted unless the cluster proves it; a
/// crafted review naming another namespace's pull secrets would otherwise tell its
/// sender whether those secrets read a private image, and its architectures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// The pod's pull secrets and service account: only when every caller is known to be
    /// the API server (its client certificate verified, or a NetworkPolicy that admits
    /// only the API server's addresses).
    PodSecrets,
    /// None: public images only. A private image's pod is routed without the constraint
    /// and the scheduler, which reads the pod from the API server, still places it by
    /// its images.
    Anonymous,
}

impl Credentials {
    /// The pod's secrets when every caller is known to be the API server, none otherwise.
    pub fn for_callers(only_the_api_server: bool) -> Self {
        if only_the_api_server {
            Credentials::PodSecrets
        } else {
            Credentials::Anonymous
        }
    }
}

#[derive(Clone)]
pub struct AdmissionLookup {
    inspector: Arc<dyn ImageInspector>,
    deadline: Duration,
    in_flight: Arc<Semaphore>,
    credentials: Credentials,
}

impl AdmissionLookup {
    /// `max_in_flight` bounds the lookups running at once, those finishing in the
    /// background included.
    pub fn new(
        inspector: Arc<dyn ImageInspector>,
        deadline: Duration,
        max_in_flight: usize,
        credentials: Credentials,
    ) -> Self {
        AdmissionLookup {
            inspector,
            deadline,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            credentials,
        }
    }

    pub fn credentials(&self) -> Credentials {
        self.credentials
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    pub async fn lookup(&self, pod: &Pod, namespace: &str) -> Lookup {
        let mut info = PodImages::of(pod);
        // A pod under admission may not carry its namespace yet: the request's does.
        info.namespace = namespace.to_owned();
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            return Lookup::Busy;
        };
        let credentials = self.credentials;
        let requests: Vec<(String, InspectRequest)> = info
            .images
            .iter()
            .map(|image| {
                let mut request = InspectRequest::for_container(info.credentials(), image);
                if credentials == Credentials::Anonymous {
                    request.pull_secrets.clear();
                    request.service_account = None;
                }
                (image.container.clone(), request)
            })
            .collect();
        let inspector = self.inspector.clone();
        let lookup = tokio::spawn(async move {
            let _permit = permit;
            let mut inspections = JoinSet::new();
            for (container, request) in requests {
                let inspector = inspector.clone();
                inspections.spawn(async move {
                    let answer =
                        tokio::time::timeout(BACKGROUND_LIMIT, inspector.inspect(&request)).await;
                    (container, request.image, answer)
                });
            }
            let mut per_container = Vec::new();
            while let Some(joined) = inspections.join_next().await {
                match joined {
                    Ok((container, _, Ok(Ok(found)))) => {
                        per_container.push((container, found.placement_platforms()));
                    }
                    Ok((_, image, Ok(Err(e)))) => return Err(format!("{image}: {e}")),
                    Ok((_, image, Err(_))) => {
                        return Err(format!("{image}: no answer in {BACKGROUND_LIMIT:?}"));
                    }
                    Err(e) => return Err(format!("inspection task: {e}")),
                }
            }
            Ok(per_container)
        });
        match tokio::time::timeout(self.deadline, lookup).await {
            // Dropping the handle detaches the task: it finishes and fills the cache.
            Err(_) => Lookup::TimedOut,
            Ok(Err(e)) => Lookup::Failed(format!("inspection task: {e}")),
            Ok(Ok(Err(e))) => Lookup::Failed(e),
            Ok(Ok(Ok(per_container))) => {
                // A bundle image confines nothing: the other images decide.
                match compatible_platforms_of(&per_container) {
                    Some(platforms) => Lookup::Platforms(platforms),
                    None => Lookup::Anywhere,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_secrets_only_when_every_caller_is_the_api_server() {
        assert_eq!(Credentials::for_callers(true), Credentials::PodSecrets);
        assert_eq!(Credentials::for_callers(false), Credentials::Anonymous);
    }
}
