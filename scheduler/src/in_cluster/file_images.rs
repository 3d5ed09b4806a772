//! `multiarch scheduler --image-platforms FILE`: image platforms from a file (the
//! `images:` map of the `simulate --scenario` format) instead of the registries, for
//! benchmarks against an API server (`multiarch bench` takes the same file) and for
//! clusters that want no registry access. An image the file does not name is not found.

use std::sync::Arc;

use async_trait::async_trait;
use multiarch_inspector::{
    ImageInfo, ImageInspector, InspectError, InspectRequest, ManifestKind, PlatformEntry,
};

use crate::{
    engine::image_source::CatalogImages,
    simulate::scenario::{Scenario, ScenarioError},
};

pub struct FileImages {
    catalog: CatalogImages,
}

impl FileImages {
    pub fn from_yaml(text: &str) -> Result<Self, ScenarioError> {
        Ok(FileImages {
            catalog: Scenario::from_yaml(text)?.image_catalog()?,
        })
    }
}

#[async_trait]
impl ImageInspector for FileImages {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        let platforms =
            self.catalog
                .images
                .get(&request.image)
                .ok_or_else(|| InspectError::NotFound {
                    image: request.image.clone(),
                })?;
        Ok(Arc::new(ImageInfo {
            image: request.image.clone(),
            digest: String::new(),
            kind: ManifestKind::Index,
            operator_bundle: false,
            binaries_pending: false,
            platforms: platforms
                .iter()
                .map(|p| PlatformEntry {
                    os: p.os.clone(),
                    architecture: p.architecture.clone(),
                    variant: p.variant.clone(),
                    digest: String::new(),
                    binary: None,
                })
                .collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn named_images_answer_and_others_are_not_found() {
        let images =
            FileImages::from_yaml("images:\n  app:1: [linux/amd64, linux/arm/v7]\n").unwrap();
        let request = |image: &str| InspectRequest {
            image: image.into(),
            ..InspectRequest::default()
        };
        let info = images.inspect(&request("app:1")).await.unwrap();
        let archs: Vec<String> = info
            .platform_list()
            .iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.architecture,
                    p.variant.clone().unwrap_or_default()
                )
            })
            .collect();
        assert_eq!(archs, ["amd64/", "arm/v7"]);
        assert!(matches!(
            images.inspect(&request("other:1")).await,
            Err(InspectError::NotFound { .. })
        ));
        assert!(FileImages::from_yaml("images:\n  app:1: [amd64]\n").is_err());
    }
}
