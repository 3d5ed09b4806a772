//! Image references (normalized as container runtimes do) and inspection results.

use std::fmt;

use multiarch_plugins::model::platform::Platform;
use oci_client::Reference;

use crate::error::InspectError;

/// A normalized reference: `nginx` → `docker.io/library/nginx:latest`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageRef(Reference);

impl ImageRef {
    pub fn parse(image: &str) -> Result<Self, InspectError> {
        let trimmed = image.trim();
        if trimmed.is_empty() || trimmed != image {
            return Err(InspectError::InvalidReference {
                image: image.to_owned(),
                reason: "empty or surrounded by spaces".into(),
            });
        }
        Reference::try_from(trimmed)
            .map(ImageRef)
            .map_err(|e| InspectError::InvalidReference {
                image: image.to_owned(),
                reason: e.to_string(),
            })
    }

    /// The registry as written (`docker.io`, `quay.io`, `127.0.0.1:5000`).
    pub fn registry(&self) -> &str {
        self.0.registry()
    }

    pub fn repository(&self) -> &str {
        self.0.repository()
    }

    /// Digest references never change: their answers are cached without expiry.
    pub fn is_digest(&self) -> bool {
        self.0.digest().is_some()
    }

    pub fn reference(&self) -> &Reference {
        &self.0
    }

    /// The same image on another registry (a mirror).
    pub fn on_registry(&self, registry: &str) -> ImageRef {
        let r = &self.0;
        ImageRef(match (r.tag(), r.digest()) {
            (Some(tag), Some(digest)) => Reference::with_tag_and_digest(
                registry.to_owned(),
                r.repository().to_owned(),
                tag.to_owned(),
                digest.to_owned(),
            ),
            (None, Some(digest)) => Reference::with_digest(
                registry.to_owned(),
                r.repository().to_owned(),
                digest.to_owned(),
            ),
            (tag, None) => Reference::with_tag(
                registry.to_owned(),
                r.repository().to_owned(),
                tag.unwrap_or("latest").to_owned(),
            ),
        })
    }

    pub fn with_digest(&self, digest: &str) -> ImageRef {
        ImageRef(self.0.clone_with_digest(digest.to_owned()))
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.whole())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestKind {
    /// An OCI image index or a Docker manifest list.
    Index,
    /// A single image manifest.
    Manifest,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlatformEntry {
    pub os: String,
    pub architecture: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The digest of the platform's image manifest.
    pub digest: String,
}

impl PlatformEntry {
    pub fn new(platform: &Platform, digest: &str) -> Self {
        PlatformEntry {
            os: platform.os.clone(),
            architecture: platform.architecture.clone(),
            variant: platform.variant.clone(),
            digest: digest.to_owned(),
        }
    }

    pub fn platform(&self) -> Platform {
        Platform::new(&self.os, &self.architecture, self.variant.as_deref())
    }
}

/// What an image reference resolves to.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ImageInfo {
    /// The normalized reference.
    pub image: String,
    /// The digest the reference resolved to.
    pub digest: String,
    pub kind: ManifestKind,
    pub platforms: Vec<PlatformEntry>,
}

impl ImageInfo {
    pub fn platform_list(&self) -> Vec<Platform> {
        let mut list: Vec<Platform> = self.platforms.iter().map(PlatformEntry::platform).collect();
        list.sort();
        list.dedup();
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_normalized_like_the_runtime() {
        let cases = [
            ("nginx", "docker.io/library/nginx:latest"),
            ("nginx:1.27", "docker.io/library/nginx:1.27"),
            ("grafana/promtail", "docker.io/grafana/promtail:latest"),
            ("quay.io/org/app:2", "quay.io/org/app:2"),
            ("127.0.0.1:5000/team/app:v1", "127.0.0.1:5000/team/app:v1"),
            ("localhost/app", "localhost/app:latest"),
        ];
        for (input, want) in cases {
            assert_eq!(ImageRef::parse(input).unwrap().to_string(), want, "{input}");
        }
    }

    #[test]
    fn digests_and_tag_plus_digest() {
        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let by_digest = ImageRef::parse(&format!("quay.io/org/app@{digest}")).unwrap();
        assert!(by_digest.is_digest());
        let both = ImageRef::parse(&format!("quay.io/org/app:2@{digest}")).unwrap();
        assert!(both.is_digest());
        assert_eq!(both.to_string(), format!("quay.io/org/app:2@{digest}"));
        assert!(!ImageRef::parse("quay.io/org/app:2").unwrap().is_digest());
        assert_eq!(
            both.on_registry("mirror:5000").to_string(),
            format!("mirror:5000/org/app:2@{digest}")
        );
    }

    #[test]
    fn invalid_references_are_errors() {
        for bad in [
            "",
            " nginx",
            "nginx:",
            "nginx@",
            ":tag",
            "quay.io/app@sha256:short",
            "a//b",
            "nginx:bad tag",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad}");
        }
    }
}
