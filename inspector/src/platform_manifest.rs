//! One platform's image manifest of an image: the image itself when it is a single
//! manifest, else the index entry of that platform (linux/amd64, or the first with a
//! platform, when none is asked for), with its config. What reads an image's files and
//! binaries starts from.

use std::sync::Arc;

use multiarch_policy::platform::Platform;

use crate::{
    bounded_fetch::BoundedFetch,
    error::InspectError,
    image::ImageRef,
    keyring::Credential,
    manifest::{self, ACCEPTED, Parsed},
    registry::{Failure, RegistryClient, malformed},
};

/// A single image's manifest and its config blob.
pub(crate) struct PlatformManifest {
    pub digest: String,
    pub bytes: Vec<u8>,
    pub config: Vec<u8>,
}

impl RegistryClient {
    pub(crate) async fn platform_manifest(
        &self,
        session: &Arc<BoundedFetch>,
        image: &ImageRef,
        credential: Option<&Credential>,
        platform: Option<&Platform>,
    ) -> Result<PlatformManifest, Failure> {
        let get = |reference: ImageRef| async move {
            let (bytes, digest, _held) = self
                .with_retries(&reference, || {
                    session.get(&reference, credential, &ACCEPTED)
                })
                .await?
                .map_err(|bytes| {
                    Failure::Other(malformed(
                        &reference,
                        manifest::ManifestError::TooLarge(bytes),
                    ))
                })?;
            let parsed = manifest::parse_manifest(&bytes, None)
                .map_err(|e| Failure::Other(malformed(&reference, e)))?;
            Ok::<_, Failure>((digest, bytes, parsed))
        };
        let (mut digest, mut bytes, mut parsed) = get(image.clone()).await?;
        if let Parsed::Index(entries) = &parsed {
            let chosen = entries
                .iter()
                .find(|e| {
                    e.platform.as_ref().is_some_and(|p| match platform {
                        Some(wanted) => p == wanted,
                        None => p.os == "linux" && p.architecture == "amd64",
                    })
                })
                .or_else(|| {
                    platform
                        .is_none()
                        .then(|| entries.iter().find(|e| e.platform.is_some()))
                        .flatten()
                })
                .ok_or_else(|| {
                    Failure::Other(InspectError::Malformed {
                        image: image.to_string(),
                        detail: match platform {
                            Some(p) => format!("the index has no {p} image"),
                            None => "the index lists no image with a platform".into(),
                        },
                    })
                })?;
            (digest, bytes, parsed) = get(image.with_digest(&chosen.digest)).await?;
        }
        let Parsed::Image { config_digest } = parsed else {
            return Err(Failure::Other(InspectError::Malformed {
                image: image.to_string(),
                detail: "an index inside the index: not an image whose files can be read".into(),
            }));
        };
        let config = self
            .image_config(session, image, credential, &config_digest)
            .await?;
        Ok(PlatformManifest {
            digest,
            bytes,
            config,
        })
    }
}
