//! What the scheduler knows about the images of one pod when a cycle starts.

use std::sync::Arc;

use multiarch_policy::platform::{ContainerPlatforms, Platform};

/// The answer of image inspection for one image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImagePlatforms {
    Known(Arc<[Platform]>),
    /// The image confines nothing: an OLM bundle image, data that is never executed.
    Anywhere,
    /// Inspection failed; the message says what a user must fix.
    Failed(Arc<str>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerImagePlatforms {
    pub container: String,
    pub image: String,
    pub platforms: ImagePlatforms,
    /// Builds the image's index names that `platforms` leaves out, as users read it: their
    /// program is of another architecture than the index says (`binaryInspection`).
    pub left_out: Option<Arc<str>>,
}

/// Every container and init container of a pod with its image's platforms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodImagePlatforms {
    pub containers: Vec<ContainerImagePlatforms>,
}

impl PodImagePlatforms {
    /// The containers whose images' platforms are known (not bundle images, not failed).
    pub fn known(&self) -> Vec<ContainerPlatforms<'_>> {
        self.containers
            .iter()
            .filter_map(|c| match &c.platforms {
                ImagePlatforms::Known(p) => Some(ContainerPlatforms {
                    container: &c.container,
                    platforms: p,
                }),
                ImagePlatforms::Anywhere | ImagePlatforms::Failed(_) => None,
            })
            .collect()
    }
}
