//! Image platforms from a table, for tests of the runtime and the gate controller (the
//! inspector itself is tested against a real registry). Unknown images fail as a registry
//! that rejects the credentials would.

use std::{collections::HashMap, sync::Arc};

use async_trait::async_trait;
use multiarch_inspector::{
    ImageInfo, ImageInspector, InspectError, InspectRequest, ManifestKind, PlatformEntry,
};

pub struct TableInspector(pub HashMap<String, Vec<&'static str>>);

#[async_trait]
impl ImageInspector for TableInspector {
    async fn inspect(&self, request: &InspectRequest) -> Result<Arc<ImageInfo>, InspectError> {
        let archs =
            self.0
                .get(&request.image)
                .ok_or_else(|| InspectError::CredentialsRejected {
                    registry: "quay.io".into(),
                })?;
        Ok(Arc::new(linux_index(&request.image, archs)))
    }
}

/// `image` as an index of Linux builds for `archs` (`amd64/v3`: with its variant).
pub fn linux_index(image: &str, archs: &[&str]) -> ImageInfo {
    ImageInfo {
        image: image.to_owned(),
        digest: "sha256:0".into(),
        kind: ManifestKind::Index,
        operator_bundle: false,
        binaries_pending: false,
        platforms: archs
            .iter()
            .map(|a| {
                let (architecture, variant) = a.split_once('/').unzip();
                PlatformEntry {
                    os: "linux".into(),
                    architecture: architecture.unwrap_or(a).into(),
                    variant: variant.map(str::to_owned),
                    digest: "sha256:1".into(),
                    binary: None,
                }
            })
            .collect(),
    }
}

/// The images the tests use.
pub fn standard() -> Arc<dyn ImageInspector> {
    Arc::new(TableInspector(HashMap::from([
        ("multi:1".to_owned(), vec!["amd64", "arm64"]),
        ("amd:1".to_owned(), vec!["amd64"]),
        ("arm:1".to_owned(), vec!["arm64"]),
        ("z:1".to_owned(), vec!["s390x"]),
        // Built for x86-64-v3 (as RHEL 10's images are) and arm64.
        ("ubi10:1".to_owned(), vec!["amd64/v3", "arm64"]),
        // The image of the recordings in tests/fixtures/kube-scheduler/.
        (
            "registry.example/app:1".to_owned(),
            vec!["amd64", "arm64", "ppc64le", "s390x"],
        ),
    ])))
}
