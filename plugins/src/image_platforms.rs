//! What the scheduler knows about the images of one pod when a cycle starts.

use std::sync::Arc;

use crate::model::platform::Platform;

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
}

/// Every container and init container of a pod with its image's platforms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodImagePlatforms {
    pub containers: Vec<ContainerImagePlatforms>,
}
