//! Image references (normalized as container runtimes do) and inspection results.

use std::fmt;

use multiarch_policy::platform::{Platform, variant_level, variants_are_levels};
use oci_client::Reference;

use crate::error::InspectError;

/// A normalized reference: `nginx` → `docker.io/library/nginx:latest`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ImageRef(Reference);

impl ImageRef {
    /// Parses and normalizes a reference with the grammar of the distribution project
    /// (`docker.io/library/` for short names, `latest` when neither tag nor digest).
    /// Hand-written: the regex-based parser costs ~60 ms of start-up per process.
    pub fn parse(image: &str) -> Result<Self, InspectError> {
        let invalid = |reason: &str| InspectError::InvalidReference {
            image: image.to_owned(),
            reason: reason.to_owned(),
        };
        if image.is_empty() || image.len() > 4096 {
            return Err(invalid("empty or too long"));
        }
        let (rest, digest) = match image.split_once('@') {
            Some((rest, digest)) => {
                if !valid_digest(digest) {
                    return Err(invalid(
                        "the digest is not algorithm:hex (e.g. sha256: and 64 hex digits)",
                    ));
                }
                (rest, Some(digest))
            }
            None => (image, None),
        };
        // A tag follows the last ':' that comes after the last '/' (a ':' before it is a port).
        let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
            None => (rest, None),
        };
        if let Some(tag) = tag
            && !valid_tag(tag)
        {
            return Err(invalid(
                "the tag must be 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'",
            ));
        }
        let (registry, repository) = match name.split_once('/') {
            Some((first, path))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.chars().any(|c| c.is_ascii_uppercase()) =>
            {
                (first.to_owned(), path.to_owned())
            }
            Some(_) => ("docker.io".to_owned(), name.to_owned()),
            None => ("docker.io".to_owned(), format!("library/{name}")),
        };
        if !valid_host(&registry) {
            return Err(invalid(
                "the registry is not a host name with an optional port",
            ));
        }
        if repository.len() > 255 || !repository.split('/').all(valid_path_component) {
            return Err(invalid(
                "repository names are lowercase letters and digits, separated by '.', '_', '__', '-' or '/'",
            ));
        }
        let reference = match (tag, digest) {
            (Some(tag), Some(digest)) => Reference::with_tag_and_digest(
                registry,
                repository,
                tag.to_owned(),
                digest.to_owned(),
            ),
            (None, Some(digest)) => Reference::with_digest(registry, repository, digest.to_owned()),
            (tag, None) => {
                Reference::with_tag(registry, repository, tag.unwrap_or("latest").to_owned())
            }
        };
        Ok(ImageRef(reference))
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

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_path_component(c: &str) -> bool {
    let bytes = c.as_bytes();
    if bytes.is_empty() || !is_alnum(bytes[0]) || !is_alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if is_alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !is_alnum(bytes[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-')) {
            return false;
        }
    }
    true
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `[\w][\w.-]{0,127}`
fn valid_tag(tag: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-';
    !tag.is_empty()
        && tag.len() <= 128
        && (tag.as_bytes()[0].is_ascii_alphanumeric() || tag.as_bytes()[0] == b'_')
        && tag.bytes().all(ok)
}

/// `algorithm:hex`, with sha256 held to exactly 64 lowercase hex digits.
fn valid_digest(digest: &str) -> bool {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return false;
    };
    let hex_ok = hex.len() >= 32
        && hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
    let algorithm_ok = !algorithm.is_empty()
        && algorithm.as_bytes()[0].is_ascii_alphabetic()
        && algorithm
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-._".contains(&b));
    algorithm_ok && hex_ok && (algorithm != "sha256" || hex.len() == 64)
}

/// A DNS name or IPv4 address (or `[IPv6]`), with an optional port.
fn valid_host(host: &str) -> bool {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, tail)) => (v6, tail.strip_prefix(':')),
            None => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    let name_ok = if host.starts_with('[') {
        name.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !name.is_empty()
            && name.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    };
    port_ok && name_ok
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestKind {
    /// An OCI image index or a Docker manifest list.
    Index,
    /// A single image manifest.
    Manifest,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct PlatformEntry {
    pub os: String,
    pub architecture: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The digest of the platform's image manifest.
    pub digest: String,
    /// What the build's program is, once its binaries are read (`binaryInspection`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<BinarySummary>,
}

/// What a build's program really is, as its ELF header and notes say (see
/// `binary_reading`): kept per platform manifest digest, so a few hundred bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BinarySummary {
    /// The program's path in the image (at most [`BinarySummary::MAX_PATH`] bytes kept).
    pub path: String,
    /// The architecture the program is built for.
    pub architecture: String,
    /// The x86-64 level the program and its loader need (1..4).
    #[serde(rename = "x86_64Level", skip_serializing_if = "Option::is_none")]
    pub x86_64_level: Option<u8>,
}

impl BinarySummary {
    /// The longest path kept: a tenant's image names its own paths.
    pub const MAX_PATH: usize = 256;

    pub fn new(path: &str, architecture: &str, x86_64_level: Option<u8>) -> Self {
        let mut end = path.len().min(Self::MAX_PATH);
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        BinarySummary {
            path: path[..end].to_owned(),
            architecture: architecture.to_owned(),
            x86_64_level,
        }
    }
}

impl PlatformEntry {
    pub fn new(platform: &Platform, digest: &str) -> Self {
        PlatformEntry {
            os: platform.os.clone(),
            architecture: platform.architecture.clone(),
            variant: platform.variant.clone(),
            digest: digest.to_owned(),
            binary: None,
        }
    }

    /// The platform as the index (or the config) names it.
    pub fn platform(&self) -> Platform {
        Platform::new(&self.os, &self.architecture, self.variant.as_deref())
    }

    /// The architecture the build's program really is, when its binaries were read and it
    /// is not the one the index names (an entry labelled arm64 whose program is amd64).
    pub fn mislabelled(&self) -> Option<&str> {
        self.binary
            .as_ref()
            .map(|b| b.architecture.as_str())
            .filter(|real| *real != self.architecture)
    }

    /// The platform a node must be to run the build: the index's, with an amd64 build's
    /// level raised to what its binaries need when they were read and need more (RHEL 10's
    /// v3 builds are not labelled so in their indexes).
    pub fn placement_platform(&self) -> Platform {
        let needed = self
            .binary
            .as_ref()
            .and_then(|b| b.x86_64_level)
            .filter(|level| *level >= 2 && variants_are_levels(&self.architecture));
        let labelled = self.variant.as_deref().map(variant_level);
        let variant = match (needed, labelled) {
            // The index names a variant that is not a level: keep what it says.
            (_, Some(None)) | (None, _) => self.variant.clone(),
            (Some(needed), Some(Some(labelled))) if labelled >= u32::from(needed) => {
                self.variant.clone()
            }
            (Some(needed), _) => Some(format!("v{needed}")),
        };
        Platform::new(&self.os, &self.architecture, variant.as_deref())
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
    /// An OLM bundle image (its config's `operators.operatorframework.io.bundle.*`
    /// labels): manifests that OLM's unpack Job copies out and never executes.
    #[serde(rename = "operatorBundle", skip_serializing_if = "std::ops::Not::not")]
    pub operator_bundle: bool,
    /// Some platforms' binaries are still being read (`binaryInspection`): ask again
    /// soon, the answer may gain their levels or lose a mislabelled platform.
    #[serde(rename = "binariesPending", skip_serializing_if = "std::ops::Not::not")]
    pub binaries_pending: bool,
}

impl ImageInfo {
    /// The platforms a pod using this image is confined to: `None` when the image
    /// confines nothing. A bundle image is data, not a program: it runs on every
    /// architecture whatever its config says (a bundle is usually built for one), so
    /// OLM's unpack Job is never confined to one architecture or left unschedulable.
    /// Where binaries were read, a mislabelled build is not counted as runnable and an
    /// amd64 build needs the level its binaries need.
    pub fn placement_platforms(&self) -> Option<Vec<Platform>> {
        (!self.operator_bundle).then(|| self.runnable_platforms())
    }

    /// The builds' platforms as far as their binaries were read: a mislabelled build left
    /// out, an amd64 build at the level its binaries need (the index's list otherwise).
    pub fn runnable_platforms(&self) -> Vec<Platform> {
        let mut list: Vec<Platform> = self
            .platforms
            .iter()
            .filter(|entry| entry.mislabelled().is_none())
            .map(PlatformEntry::placement_platform)
            .collect();
        list.sort();
        list.dedup();
        list
    }

    /// `image quay.io/x:1's arm64 build runs a program built for amd64 (/bin/app)`, one per
    /// build whose binaries are of another architecture than its index entry says.
    pub fn mislabelled_builds(&self) -> Vec<String> {
        self.platforms
            .iter()
            .filter_map(|entry| {
                let real = entry.mislabelled()?;
                let path = entry.binary.as_ref().map_or("", |b| b.path.as_str());
                Some(format!(
                    "image {}'s {} build runs a program built for {real} ({path}): not counted as runnable",
                    self.image,
                    entry.platform()
                ))
            })
            .collect()
    }

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
            ("localhost:5000/app", "localhost:5000/app:latest"),
            ("my_org/app", "docker.io/my_org/app:latest"),
            ("quay.io/a/b/c__d-e.f:v1.2_3", "quay.io/a/b/c__d-e.f:v1.2_3"),
            ("[::1]:5000/app:1", "[::1]:5000/app:1"),
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
