//! Registry settings from one YAML file: per-registry CA bundle, plain-HTTP (insecure)
//! registries, mirrors tried in order before the source, blocked registries.
//!
//! ```yaml
//! registries:
//!   - registry: registry.example.com        # host[:port]
//!     caFile: /etc/multiarch/example-ca.pem
//!     mirrors: [mirror.example.com:5000]
//!   - registry: 127.0.0.1:5000
//!     insecure: true                        # plain HTTP
//!   - registry: untrusted.example.org
//!     blocked: true
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read registry settings {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("registry settings {path} are not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("cannot read the CA bundle {path} of registry {registry}: {source}")]
    Ca {
        registry: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistrySettings {
    #[serde(default)]
    pub registries: Vec<Registry>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    /// `host` or `host:port`, as in image references.
    pub registry: String,
    /// PEM bundle of the CAs that sign this registry's certificate.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Speak plain HTTP.
    #[serde(default)]
    pub insecure: bool,
    /// Registries serving the same content, tried in order before this one.
    #[serde(default)]
    pub mirrors: Vec<String>,
    /// Never contact it: images from it fail with a clear reason.
    #[serde(default)]
    pub blocked: bool,
    /// It may redirect the inspector (or name a token service) at internal addresses of
    /// hosts other than its own: in-cluster registries whose blobs live in in-cluster
    /// storage. Off by default: see `address_policy`.
    #[serde(default)]
    pub allow_internal_redirects: bool,
    /// The CA bundle's content, read by [`RegistrySettings::load`].
    #[serde(skip)]
    pub ca_pem: Option<Vec<u8>>,
}

impl RegistrySettings {
    /// Reads the file and the CA bundles it names.
    pub fn load(path: &Path) -> Result<Self, SettingsError> {
        let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut settings: RegistrySettings =
            serde_yaml_ng::from_str(&text).map_err(|e| SettingsError::Parse {
                path: path.to_owned(),
                message: e.to_string(),
            })?;
        for r in &mut settings.registries {
            if let Some(ca) = &r.ca_file {
                let pem = std::fs::read(ca).map_err(|source| SettingsError::Ca {
                    registry: r.registry.clone(),
                    path: ca.clone(),
                    source,
                })?;
                r.ca_pem = Some(pem);
            }
        }
        Ok(settings)
    }

    pub fn for_registry(&self, registry: &str) -> Option<&Registry> {
        self.registries
            .iter()
            .find(|r| r.registry.eq_ignore_ascii_case(registry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_settings_and_ca_bundles() {
        let dir = std::env::temp_dir().join(format!("multiarch-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("ca.pem"), b"-----BEGIN CERTIFICATE-----\n").unwrap();
        let file = dir.join("registries.yaml");
        std::fs::write(
            &file,
            format!(
                "registries:\n  - registry: r.example.com\n    caFile: {}\n    mirrors: [m1:5000, m2]\n  - registry: 127.0.0.1:5000\n    insecure: true\n  - registry: bad.example.org\n    blocked: true\n",
                dir.join("ca.pem").display()
            ),
        )
        .unwrap();
        let settings = RegistrySettings::load(&file).unwrap();
        let r = settings.for_registry("r.example.com").unwrap();
        assert_eq!(r.mirrors, ["m1:5000", "m2"]);
        assert!(r.ca_pem.as_ref().unwrap().starts_with(b"-----BEGIN"));
        assert!(settings.for_registry("127.0.0.1:5000").unwrap().insecure);
        assert!(settings.for_registry("bad.example.org").unwrap().blocked);
        assert!(settings.for_registry("other").is_none());

        std::fs::write(&file, "registries:\n  - registry: x\n    cafile: y\n").unwrap();
        let err = RegistrySettings::load(&file).unwrap_err().to_string();
        assert!(err.contains("unknown field `cafile`"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
