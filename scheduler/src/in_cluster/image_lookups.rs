//! Image platforms for the scheduling loop without waiting: answers come from the
//! inspector (in-process or gRPC) in background tasks; until then a pod waits aside.

use super::inbox_sender::InboxSender;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use multiarch_inspector::{ImageInspector, InspectRequest, secrets::keyring_key};
use multiarch_plugins::model::pod::PodInfo;
use multiarch_policy::pod_images::ContainerImage;

use super::inbox::LoopMessage;
use crate::engine::image_source::{ImageLookup, ImageSource};

/// An answer is re-asked after this long (the inspector's own cache makes that cheap and
/// honours tag TTLs); failures after `failure_ttl`.
const ANSWER_TTL: Duration = Duration::from_secs(300);

/// An answer whose builds' binaries are still being read (`binaryInspection`) is re-asked
/// after this long: the next may carry their levels or leave a mislabelled build out.
const BINARIES_PENDING_TTL: Duration = Duration::from_secs(10);

/// Where the credentials are (a hash of the namespace, the pull secret names and the
/// service account: 32 bytes however many names a pod lists), the image, and the pod UID
/// for `imagePullPolicy: Always` (one fresh inspection per pod).
type Key = ([u8; 32], String, Option<String>);

enum Slot {
    Pending,
    Done {
        lookup: ImageLookup,
        at: Instant,
        /// How long `lookup` is answered from here.
        ttl: Duration,
    },
}

pub struct InspectedImages {
    inspector: Arc<dyn ImageInspector>,
    slots: Arc<Mutex<HashMap<Key, Slot>>>,
    inbox: InboxSender,
    failure_ttl: Duration,
}

impl InspectedImages {
    pub fn new(
        inspector: Arc<dyn ImageInspector>,
        inbox: InboxSender,
        failure_ttl: Duration,
    ) -> Self {
        InspectedImages {
            inspector,
            slots: Arc::default(),
            inbox,
            failure_ttl,
        }
    }

    /// Forgets answers older than their TTL, so the map does not grow without bound.
    pub fn expire(&self) {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|_, slot| match slot {
                Slot::Pending => true,
                Slot::Done { at, ttl, .. } => at.elapsed() < *ttl,
            });
    }
}

impl ImageSource for InspectedImages {
    fn lookup(&self, pod: &PodInfo, image: &ContainerImage) -> ImageLookup {
        let credentials = pod.pull_credentials();
        let key: Key = (
            keyring_key(
                credentials.namespace,
                credentials.pull_secrets,
                credentials.service_account,
            ),
            image.image.clone(),
            image.pull_always.then(|| pod.uid.clone()),
        );
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slots.get(&key) {
            Some(Slot::Pending) => return ImageLookup::Pending,
            Some(Slot::Done { lookup, at, ttl }) if at.elapsed() < *ttl => return lookup.clone(),
            Some(Slot::Done { .. }) | None => {}
        }
        slots.insert(key.clone(), Slot::Pending);
        drop(slots);
        let request = InspectRequest::for_container(pod.pull_credentials(), image);
        let inspector = self.inspector.clone();
        let slots = self.slots.clone();
        let inbox = self.inbox.clone();
        let mut answer = Answer {
            key: Some(key),
            image: request.image.clone(),
            slots,
            inbox,
            failure_ttl: self.failure_ttl,
        };
        tokio::spawn(async move {
            match inspector.inspect(&request).await {
                Ok(info) => {
                    let ttl = if info.binaries_pending {
                        BINARIES_PENDING_TTL
                    } else {
                        ANSWER_TTL
                    };
                    answer.give(known(&info), ttl);
                }
                Err(e) => answer.fail(e.to_string().into()),
            }
        });
        ImageLookup::Pending
    }
}

/// What the core knows of an inspected image: the builds it may run (with a mislabelled
/// build left out, and said so), or anywhere (a bundle image).
fn known(info: &multiarch_inspector::ImageInfo) -> ImageLookup {
    match info.placement_platforms() {
        Some(platforms) => {
            let mislabelled = info.mislabelled_builds();
            if !mislabelled.is_empty() {
                tracing::warn!(image = %info.image, builds = ?mislabelled, "builds left out: their program is of another architecture");
            }
            ImageLookup::Known {
                platforms: platforms.into(),
                left_out: (!mislabelled.is_empty()).then(|| mislabelled.join("; ").into()),
            }
        }
        None => ImageLookup::Anywhere,
    }
}

/// Delivers a lookup's answer; one that never came (the task panicked or was cancelled)
/// is delivered as a failure, so that no pod waits aside for it forever.
struct Answer {
    key: Option<Key>,
    image: String,
    slots: Arc<Mutex<HashMap<Key, Slot>>>,
    inbox: InboxSender,
    failure_ttl: Duration,
}

impl Answer {
    fn fail(&mut self, reason: Arc<str>) {
        let ttl = self.failure_ttl;
        self.give(ImageLookup::Failed(reason), ttl);
    }

    fn give(&mut self, lookup: ImageLookup, ttl: Duration) {
        let Some(key) = self.key.take() else {
            return;
        };
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                key,
                Slot::Done {
                    lookup,
                    at: Instant::now(),
                    ttl,
                },
            );
        self.inbox
            .deliver(LoopMessage::ImagesResolved(vec![self.image.clone()]));
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.fail("the image lookup ended without an answer".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inspector that panics, as a bug in a parser would.
    struct Panicking;

    #[async_trait::async_trait]
    impl ImageInspector for Panicking {
        async fn inspect(
            &self,
            _: &InspectRequest,
        ) -> Result<Arc<multiarch_inspector::ImageInfo>, multiarch_inspector::InspectError>
        {
            panic!("bug");
        }
    }

    #[tokio::test]
    async fn a_lookup_whose_task_panics_is_answered_as_failed() {
        let (tx, mut rx) = InboxSender::channel(16);
        let images = InspectedImages::new(Arc::new(Panicking), tx, Duration::from_secs(30));
        let pod = multiarch_plugins::model::pod::PodBuilder::new("shop", "web")
            .container("app", "quay.io/app:v1", "100m", "64Mi")
            .info();
        let image = pod.images[0].clone();
        assert!(matches!(images.lookup(&pod, &image), ImageLookup::Pending));
        let resolved = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap();
        assert!(
            matches!(&resolved, Some(LoopMessage::ImagesResolved(images)) if images == &["quay.io/app:v1"])
        );
        match images.lookup(&pod, &image) {
            ImageLookup::Failed(reason) => {
                assert_eq!(&*reason, "the image lookup ended without an answer");
            }
            _ => panic!("not answered as failed"),
        }
    }
}
