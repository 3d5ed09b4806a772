//! Parsing of registry answers: OCI image indexes, Docker manifest lists, single OCI and
//! Docker schema-2 manifests, and image config blobs. Pure functions over bytes, so that
//! they are fuzzed directly; nothing here panics on any input.

use serde::Deserialize;

use multiarch_policy::platform::Platform;

use crate::{
    bounded_json::{any_entry, bounded_list, first_entry},
    chunked_toc::{TOC_POSITION_ANNOTATION, TocPosition},
};

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Every manifest media type we ask registries for.
pub const ACCEPTED: [&str; 4] = [OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST];

/// Manifests larger than this are refused (a real one is a few KiB).
pub const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

/// Entries an index may list. Real ones list a few, Windows images a few dozen; 4 MiB of
/// JSON holds ~50,000, each kept (and cached) if nothing stopped them.
pub const MAX_INDEX_ENTRIES: usize = 1000;

/// Layers a single manifest may list. Docker builds at most 127; anything far beyond is
/// not an image a node would run.
pub const MAX_LAYERS: usize = 1000;

/// The annotation buildx puts on attestation (SBOM, provenance) entries of an index.
const REFERENCE_TYPE: &str = "vnd.docker.reference.type";

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest exceeds 4 MiB ({0} bytes or more), more than a manifest may have")]
    TooLarge(usize),
    #[error("the manifest is not valid JSON: {0}")]
    Json(String),
    #[error("unsupported manifest media type {0:?}")]
    MediaType(String),
    #[error("the manifest has no config descriptor")]
    NoConfig,
    #[error("the image config does not name its architecture")]
    NoArchitecture,
    #[error(
        "the index lists more than {MAX_INDEX_ENTRIES} manifests, more than an image index may list here"
    )]
    TooManyEntries,
    #[error("the manifest lists more than {MAX_LAYERS} layers, more than an image may have here")]
    TooManyLayers,
}

/// What a manifest says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An index: entries with their platform (attestations and `unknown` skipped).
    Index(Vec<IndexEntry>),
    /// A single image: its config blob holds the platform.
    Image { config_digest: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    pub digest: String,
    pub media_type: String,
    /// `None` for entries without platform (nested indexes usually).
    pub platform: Option<Platform>,
}

/// An index or a single manifest, as far as telling them apart and choosing an entry
/// needs: a single manifest's `layers` are not read at all (skipped unkept), an index's
/// entries are bounded while they stream.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawManifest {
    #[serde(default)]
    media_type: Option<String>,
    /// `None` inside: more than [`MAX_INDEX_ENTRIES`] (the rest is skipped unread).
    #[serde(default, deserialize_with = "bounded_index_entries")]
    manifests: Option<Option<Vec<RawDescriptor>>>,
    #[serde(default)]
    config: Option<RawDescriptor>,
}

/// A single manifest's layers, bounded while they stream.
#[derive(Deserialize)]
struct RawLayers {
    /// `None` inside: more than [`MAX_LAYERS`].
    #[serde(default, deserialize_with = "bounded_layers")]
    layers: Option<Option<Vec<RawLayer>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawLayer {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    digest: String,
    /// Read from `annotations`, which are not kept.
    #[serde(default, rename = "annotations", deserialize_with = "toc_annotation")]
    toc: Option<TocPosition>,
}

fn bounded_index_entries<'de, D>(
    deserializer: D,
) -> Result<Option<Option<Vec<RawDescriptor>>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    bounded_list(deserializer, MAX_INDEX_ENTRIES)
}

fn bounded_layers<'de, D>(deserializer: D) -> Result<Option<Option<Vec<RawLayer>>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    bounded_list(deserializer, MAX_LAYERS)
}

/// `annotations` of a layer: only where a zstd:chunked layer's table of contents is.
fn toc_annotation<'de, D>(deserializer: D) -> Result<Option<TocPosition>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    first_entry(deserializer, |key, value| {
        (key == TOC_POSITION_ANNOTATION)
            .then(|| TocPosition::of_annotation(value))
            .flatten()
    })
}

/// `annotations` of a descriptor: only whether buildx marked it an attestation is kept.
fn attestation_annotation<'de, D>(deserializer: D) -> Result<bool, D::Error>
where
    D: serde::Deserializer<'de>,
{
    any_entry(deserializer, |key, value| {
        key == REFERENCE_TYPE && value == "attestation-manifest"
    })
}

/// `config.Labels` of an image config: only whether one marks an OLM bundle is kept.
fn bundle_label<'de, D>(deserializer: D) -> Result<bool, D::Error>
where
    D: serde::Deserializer<'de>,
{
    any_entry(deserializer, |key, _| {
        key.starts_with(OPERATOR_BUNDLE_LABEL_PREFIX)
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDescriptor {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    digest: String,
    #[serde(default)]
    platform: Option<RawPlatform>,
    /// Read from `annotations`, which are not kept.
    #[serde(
        default,
        rename = "annotations",
        deserialize_with = "attestation_annotation"
    )]
    attestation: bool,
}

#[derive(Deserialize)]
struct RawPlatform {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    variant: Option<String>,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    os: Option<String>,
    #[serde(default)]
    architecture: Option<String>,
    #[serde(default)]
    variant: Option<String>,
    #[serde(default)]
    config: Option<RawRunConfig>,
}

/// The run configuration of an image config; only whether its labels mark an OLM
/// bundle is read.
#[derive(Deserialize)]
struct RawRunConfig {
    #[serde(default, rename = "Labels", deserialize_with = "bundle_label")]
    operator_bundle: bool,
}

/// The prefix of the labels `operator-sdk` and `opm` put on an OLM bundle image
/// (`operators.operatorframework.io.bundle.mediatype.v1: registry+v1`, `...manifests.v1`,
/// `...package.v1`...).
pub const OPERATOR_BUNDLE_LABEL_PREFIX: &str = "operators.operatorframework.io.bundle.";

/// What an image config says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageConfig {
    pub platform: Platform,
    /// An OLM bundle image: manifests that OLM's unpack Job copies out, never executed.
    pub operator_bundle: bool,
}

/// Parses a manifest. `content_type` is the registry's `Content-Type`; the document's own
/// `mediaType` wins when present, and an index is recognized by its `manifests` list.
pub fn parse_manifest(bytes: &[u8], content_type: Option<&str>) -> Result<Parsed, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(bytes.len()));
    }
    let raw: RawManifest =
        serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
    let media_type = raw
        .media_type
        .clone()
        .or_else(|| content_type.map(|c| c.split(';').next().unwrap_or(c).trim().to_owned()))
        .unwrap_or_default();
    let is_index = matches!(media_type.as_str(), OCI_INDEX | DOCKER_LIST)
        || (media_type.is_empty() && raw.manifests.is_some());
    if is_index {
        let entries = raw
            .manifests
            .unwrap_or(Some(Vec::new()))
            .ok_or(ManifestError::TooManyEntries)?
            .into_iter()
            .filter(|d| !d.attestation)
            .filter_map(|d| {
                let platform = d
                    .platform
                    .as_ref()
                    .map(|p| Platform::new(&p.os, &p.architecture, p.variant.as_deref()));
                if platform
                    .as_ref()
                    .is_some_and(|p| p.os == "unknown" || p.architecture == "unknown")
                {
                    return None;
                }
                Some(IndexEntry {
                    digest: d.digest,
                    media_type: d.media_type.unwrap_or_default(),
                    platform,
                })
            })
            .collect();
        return Ok(Parsed::Index(entries));
    }
    let is_image = matches!(media_type.as_str(), OCI_MANIFEST | DOCKER_MANIFEST)
        || (media_type.is_empty() && raw.config.is_some());
    if !is_image {
        return Err(ManifestError::MediaType(media_type));
    }
    let config = raw.config.ok_or(ManifestError::NoConfig)?;
    if config.digest.is_empty() {
        return Err(ManifestError::NoConfig);
    }
    Ok(Parsed::Image {
        config_digest: config.digest,
    })
}

/// One layer of an image manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    pub digest: String,
    pub media_type: String,
    /// Where a zstd:chunked layer's table of contents is (`chunked_toc`).
    pub toc: Option<TocPosition>,
}

/// The layers of a single image manifest, in order (bottom first); more than
/// [`MAX_LAYERS`] are refused without being kept.
pub fn parse_layers(bytes: &[u8]) -> Result<Vec<Layer>, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(bytes.len()));
    }
    let raw: RawLayers =
        serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
    Ok(raw
        .layers
        .unwrap_or(Some(Vec::new()))
        .ok_or(ManifestError::TooManyLayers)?
        .into_iter()
        .map(|d| {
            let media_type = d.media_type.unwrap_or_default();
            Layer {
                digest: d.digest,
                // A table is only read in a zstd layer.
                toc: d.toc.filter(|_| media_type.ends_with("+zstd")),
                media_type,
            }
        })
        .collect())
}

/// Reads the platform from an image config blob (`os`, `architecture`, `variant`).
pub fn parse_config(bytes: &[u8]) -> Result<Platform, ManifestError> {
    parse_image_config(bytes).map(|config| config.platform)
}

/// Reads the platform and whether the image is an OLM bundle (a label with
/// [`OPERATOR_BUNDLE_LABEL_PREFIX`]) from an image config blob.
pub fn parse_image_config(bytes: &[u8]) -> Result<ImageConfig, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge(bytes.len()));
    }
    let raw: RawConfig =
        serde_json::from_slice(bytes).map_err(|e| ManifestError::Json(e.to_string()))?;
    let architecture = raw
        .architecture
        .filter(|a| !a.is_empty())
        .ok_or(ManifestError::NoArchitecture)?;
    let os = raw
        .os
        .filter(|o| !o.is_empty())
        .unwrap_or_else(|| "linux".to_owned());
    let operator_bundle = raw.config.is_some_and(|c| c.operator_bundle);
    Ok(ImageConfig {
        platform: Platform::new(&os, &architecture, raw.variant.as_deref()),
        operator_bundle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_index_skips_attestations_and_unknown_entries() {
        let index = br#"{
          "schemaVersion": 2,
          "mediaType": "application/vnd.oci.image.index.v1+json",
          "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:a", "size": 1,
             "platform": {"os": "linux", "architecture": "amd64"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:b", "size": 1,
             "platform": {"os": "linux", "architecture": "arm", "variant": "v7"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:c", "size": 1,
             "platform": {"os": "unknown", "architecture": "unknown"},
             "annotations": {"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": "sha256:a"}},
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:d", "size": 1,
             "platform": {"os": "windows", "architecture": "amd64", "os.version": "10.0.17763.1"}}
          ]}"#;
        let Parsed::Index(entries) = parse_manifest(index, None).unwrap() else {
            panic!("not an index")
        };
        let platforms: Vec<String> = entries
            .iter()
            .map(|e| e.platform.as_ref().unwrap().to_string())
            .collect();
        assert_eq!(platforms, ["amd64", "arm/v7", "windows/amd64"]);
    }

    #[test]
    fn docker_list_without_media_type_field_uses_the_content_type() {
        let list = br#"{"schemaVersion": 2, "manifests": [
            {"digest": "sha256:a", "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}}]}"#;
        let Parsed::Index(entries) = parse_manifest(list, Some(DOCKER_LIST)).unwrap() else {
            panic!()
        };
        assert_eq!(entries[0].platform, Some(Platform::linux("arm64")));
    }

    #[test]
    fn single_manifests_point_at_their_config() {
        let manifest = br#"{"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:cfg", "size": 7},
            "layers": []}"#;
        assert_eq!(
            parse_manifest(manifest, None).unwrap(),
            Parsed::Image {
                config_digest: "sha256:cfg".into()
            }
        );
        assert_eq!(
            parse_config(br#"{"architecture": "s390x", "os": "linux", "rootfs": {}}"#).unwrap(),
            Platform::linux("s390x")
        );
        assert_eq!(
            parse_config(br#"{"architecture": "arm", "variant": "v6"}"#).unwrap(),
            Platform::new("linux", "arm", Some("v6"))
        );
    }

    #[test]
    fn bundle_images_are_recognised_by_their_olm_labels_only() {
        let bundle = br#"{"architecture": "amd64", "os": "linux", "config": {"Labels": {
            "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
            "operators.operatorframework.io.bundle.package.v1": "etcd"}}}"#;
        let config = parse_image_config(bundle).unwrap();
        assert!(config.operator_bundle);
        assert_eq!(config.platform, Platform::linux("amd64"));
        for plain in [
            &br#"{"architecture": "amd64"}"#[..],
            br#"{"architecture": "amd64", "config": null}"#,
            br#"{"architecture": "amd64", "config": {"Labels": null}}"#,
            // An operator's own image may carry the SDK's metrics labels: it is a program.
            br#"{"architecture": "amd64", "config": {"Labels": {"operators.operatorframework.io.metrics.builder": "operator-sdk-v1.37.0"}}}"#,
        ] {
            assert!(!parse_image_config(plain).unwrap().operator_bundle);
        }
    }

    fn index_of(entries: usize) -> String {
        let entry = r#"{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:1111111111111111111111111111111111111111111111111111111111111111","size":1,"platform":{"os":"linux","architecture":"arm64"}}"#;
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[{}]}}"#,
            vec![entry; entries].join(",")
        )
    }

    #[test]
    fn an_index_may_list_up_to_the_entry_limit() {
        let Parsed::Index(entries) =
            parse_manifest(index_of(MAX_INDEX_ENTRIES).as_bytes(), None).unwrap()
        else {
            panic!("not an index");
        };
        assert_eq!(entries.len(), MAX_INDEX_ENTRIES);
        assert_eq!(
            parse_manifest(index_of(MAX_INDEX_ENTRIES + 1).as_bytes(), None),
            Err(ManifestError::TooManyEntries)
        );
        assert!(
            ManifestError::TooManyEntries
                .to_string()
                .contains("more than 1000 manifests"),
            "the error names the limit"
        );
    }

    #[test]
    fn layers_are_read_up_to_their_limit_and_only_where_asked_for() {
        let manifest = |layers: usize| {
            format!(
                r#"{{"mediaType":"{OCI_MANIFEST}","config":{{"digest":"sha256:c"}},"layers":[{}]}}"#,
                vec![r#"{"mediaType":"m","digest":"sha256:l"}"#; layers].join(",")
            )
        };
        assert_eq!(
            parse_layers(manifest(MAX_LAYERS).as_bytes()).unwrap().len(),
            MAX_LAYERS
        );
        assert_eq!(
            parse_layers(manifest(MAX_LAYERS + 1).as_bytes()),
            Err(ManifestError::TooManyLayers)
        );
        // Telling an image from an index never reads its layers.
        assert_eq!(
            parse_manifest(manifest(MAX_LAYERS + 1).as_bytes(), None),
            Ok(Parsed::Image {
                config_digest: "sha256:c".into()
            })
        );
        assert_eq!(
            parse_layers(br#"{"layers": null}"#),
            Ok(Vec::new()),
            "no layers is none"
        );
    }

    #[test]
    fn a_zstd_chunked_layer_says_where_its_table_of_contents_is() {
        let layers = parse_layers(
            serde_json::json!({"layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": "sha256:a",
                 "annotations": {"io.github.containers.zstd-chunked.manifest-checksum": "sha256:x",
                                 TOC_POSITION_ANNOTATION: "100:20:300:1"}},
                // Not zstd: a table there is not believed.
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": "sha256:b",
                 "annotations": {TOC_POSITION_ANNOTATION: "100:20:300:1"}},
                // A position of another shape: streamed.
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": "sha256:c",
                 "annotations": {TOC_POSITION_ANNOTATION: "100:20"}},
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+zstd", "digest": "sha256:d",
                 "annotations": null},
            ]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let tocs: Vec<Option<TocPosition>> = layers.iter().map(|l| l.toc).collect();
        assert_eq!(
            tocs,
            [
                Some(TocPosition {
                    offset: 100,
                    compressed: 20,
                    uncompressed: 300
                }),
                None,
                None,
                None
            ]
        );
    }

    #[test]
    fn only_the_annotation_and_labels_that_matter_are_looked_at() {
        let index = format!(
            r#"{{"mediaType":"{OCI_INDEX}","manifests":[
              {{"digest":"sha256:a","platform":{{"os":"linux","architecture":"amd64"}},
                "annotations":{{"x":"1","vnd.docker.reference.type":"attestation-manifest","y":"2"}}}},
              {{"digest":"sha256:b","platform":{{"os":"linux","architecture":"arm64"}},
                "annotations":{{"vnd.docker.reference.type":"something-else"}}}},
              {{"digest":"sha256:c","platform":{{"os":"linux","architecture":"s390x"}},"annotations":null}}]}}"#
        );
        let Parsed::Index(entries) = parse_manifest(index.as_bytes(), None).unwrap() else {
            panic!("not an index")
        };
        let digests: Vec<&str> = entries.iter().map(|e| e.digest.as_str()).collect();
        assert_eq!(digests, ["sha256:b", "sha256:c"]);
        // Annotations and labels are maps of strings, as before.
        assert!(matches!(
            parse_manifest(
                format!(r#"{{"mediaType":"{OCI_INDEX}","manifests":[{{"digest":"d","annotations":{{"a":1}}}}]}}"#)
                    .as_bytes(),
                None
            ),
            Err(ManifestError::Json(_))
        ));
        let labelled = br#"{"architecture":"amd64","config":{"Labels":{"a":"b","operators.operatorframework.io.bundle.package.v1":"x","c":"d"}}}"#;
        assert!(parse_image_config(labelled).unwrap().operator_bundle);
    }

    #[test]
    fn a_null_or_empty_manifest_list_is_an_empty_index() {
        for manifests in ["null", "[]"] {
            let doc = format!(r#"{{"mediaType":"{OCI_INDEX}","manifests":{manifests}}}"#);
            assert_eq!(
                parse_manifest(doc.as_bytes(), None),
                Ok(Parsed::Index(Vec::new()))
            );
        }
    }

    #[test]
    fn bad_documents_are_errors() {
        assert!(matches!(
            parse_manifest(b"{", None),
            Err(ManifestError::Json(_))
        ));
        assert_eq!(
            parse_manifest(b"[]", None),
            Err(ManifestError::MediaType(String::new()))
        );
        assert!(matches!(
            parse_manifest(b"null", None),
            Err(ManifestError::Json(_))
        ));
        assert_eq!(
            parse_manifest(
                br#"{"mediaType": "application/vnd.docker.distribution.manifest.v1+prettyjws"}"#,
                None
            ),
            Err(ManifestError::MediaType(
                "application/vnd.docker.distribution.manifest.v1+prettyjws".into()
            ))
        );
        assert_eq!(
            parse_manifest(
                br#"{"mediaType": "application/vnd.oci.image.manifest.v1+json"}"#,
                None
            ),
            Err(ManifestError::NoConfig)
        );
        assert_eq!(
            parse_config(br#"{"os": "linux"}"#),
            Err(ManifestError::NoArchitecture)
        );
        let huge = vec![b' '; MAX_MANIFEST_BYTES + 1];
        assert_eq!(
            parse_manifest(&huge, None),
            Err(ManifestError::TooLarge(MAX_MANIFEST_BYTES + 1))
        );
    }
}
