//! Where the core gets image platforms from, without waiting: the answer is known, failed,
//! or still being worked on (then the pod waits in the queue and the cycle moves on).

use std::{collections::HashMap, sync::Arc};

use multiarch_plugins::model::pod::PodInfo;
use multiarch_policy::platform::Platform;
use multiarch_policy::pod_images::ContainerImage;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageLookup {
    Known {
        platforms: Arc<[Platform]>,
        /// Builds the index names that are not runnable where it says (their program
        /// is of another architecture), as users read it.
        left_out: Option<Arc<str>>,
    },
    /// The image confines nothing (an OLM bundle image: data, never executed).
    Anywhere,
    Failed(Arc<str>),
    Pending,
}

pub trait ImageSource {
    /// Must not block: start an inspection if needed and answer `Pending`. The pod says
    /// where its pull credentials are.
    fn lookup(&self, pod: &PodInfo, image: &ContainerImage) -> ImageLookup;
}

/// A fixed catalog (simulate, tests): images not in it fail with a clear message.
#[derive(Clone, Debug, Default)]
pub struct CatalogImages {
    pub images: HashMap<String, Arc<[Platform]>>,
}

impl ImageSource for CatalogImages {
    fn lookup(&self, _: &PodInfo, image: &ContainerImage) -> ImageLookup {
        match self.images.get(&image.image) {
            Some(platforms) => ImageLookup::Known {
                platforms: platforms.clone(),
                left_out: None,
            },
            None => ImageLookup::Failed(
                format!(
                    "image {} is not in the simulation's image catalog",
                    image.image
                )
                .into(),
            ),
        }
    }
}
