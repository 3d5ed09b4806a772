//! `--platforms FILE`: image → platforms, offline (no registry). The `images:` map of the
//! `simulate --scenario` format, so a scenario file serves as it is (its other keys are
//! ignored).

use std::collections::BTreeMap;

use multiarch_policy::platform::Platform;
use serde::Deserialize;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlatformsFileError {
    #[error("the platforms file is not valid YAML: {0}")]
    Yaml(String),
    #[error("image {image:?}: {platform:?} is not os/architecture[/variant]")]
    Platform { image: String, platform: String },
}

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    images: BTreeMap<String, Vec<String>>,
}

/// The images of a platforms file.
pub fn read(text: &str) -> Result<BTreeMap<String, Vec<Platform>>, PlatformsFileError> {
    let file: File =
        serde_yaml_ng::from_str(text).map_err(|e| PlatformsFileError::Yaml(e.to_string()))?;
    file.images
        .into_iter()
        .map(|(image, platforms)| {
            let parsed = platforms
                .iter()
                .map(|p| {
                    Platform::parse(p).ok_or_else(|| PlatformsFileError::Platform {
                        image: image.clone(),
                        platform: p.clone(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((image, parsed))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_read_and_bad_platforms_named() {
        let images =
            read("nodes: []\nimages:\n  \"web:1\": [linux/amd64, linux/arm/v7]\n").unwrap();
        assert_eq!(
            images["web:1"],
            [
                Platform::linux("amd64"),
                Platform::new("linux", "arm", Some("v7"))
            ]
        );
        assert_eq!(
            read("images: {\"web:1\": [arm64]}")
                .unwrap_err()
                .to_string(),
            "image \"web:1\": \"arm64\" is not os/architecture[/variant]"
        );
    }
}
