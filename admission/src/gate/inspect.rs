//! The images of a gated pod inspected together: their common platforms, within a
//! deadline, a few at a time.

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use multiarch_inspector::InspectRequest;
use multiarch_policy::{platform::compatible_platforms_of, pod_images::PodImages};

use super::{context::GateContext, process::Inspection};

/// The platforms all containers and init containers support, or the first error. The
/// images are inspected `images_at_once` at a time, within `pod_inspection_deadline`.
pub(super) async fn inspect(context: &GateContext, pod: &Pod) -> Inspection {
    let info = PodImages::of(pod);
    // Owned futures (not borrowing the images): the stream stays `Send` for every lifetime.
    let lookups: Vec<_> = info
        .images
        .iter()
        .map(|image| {
            let request = InspectRequest::for_container(info.credentials(), image);
            let (inspector, container) = (context.inspector.clone(), image.container.clone());
            async move {
                inspector
                    .inspect(&request)
                    .await
                    .map(|found| (container, found.placement_platforms()))
            }
        })
        .collect();
    let lookups = futures_util::stream::iter(lookups)
        .buffered(context.options.images_at_once.max(1))
        .try_collect::<Vec<_>>();
    let deadline = context.options.pod_inspection_deadline;
    let per_image = match tokio::time::timeout(deadline, lookups).await {
        Ok(Ok(per_image)) => per_image,
        Ok(Err(e)) => return Inspection::Failed(e.to_string()),
        Err(_) => {
            return Inspection::Failed(format!(
                "the pod's {} images were not all inspected within {deadline:?}",
                info.images.len()
            ));
        }
    };
    // A bundle image confines nothing: the other images decide.
    match compatible_platforms_of(&per_image) {
        Some(platforms) => Inspection::Compatible(platforms),
        None => Inspection::Anywhere,
    }
}
