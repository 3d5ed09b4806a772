//! CPU architectures as the API names them (Go's `GOARCH` spelling, as the kubelet labels nodes).

use std::{borrow::Cow, fmt, str::FromStr};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use crate::schema::ARCHITECTURE_LIST;

/// An architecture that `ClusterPodPlacementConfig` and `PodPlacementConfig` accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    Amd64,
    Arm64,
    Ppc64le,
    S390x,
}

impl Architecture {
    /// Every accepted architecture, in the order the API documents them.
    pub const ALL: [Architecture; 4] = [
        Architecture::Amd64,
        Architecture::Arm64,
        Architecture::Ppc64le,
        Architecture::S390x,
    ];

    /// The names of [`ALL`](Self::ALL), in the same order.
    pub const NAMES: [&'static str; 4] = [
        Architecture::ALL[0].as_str(),
        Architecture::ALL[1].as_str(),
        Architecture::ALL[2].as_str(),
        Architecture::ALL[3].as_str(),
    ];

    /// The name as nodes carry it in `kubernetes.io/arch`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Architecture::Amd64 => "amd64",
            Architecture::Arm64 => "arm64",
            Architecture::Ppc64le => "ppc64le",
            Architecture::S390x => "s390x",
        }
    }
}

impl fmt::Display for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name is not one of the accepted architectures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown architecture {0:?}: use one of amd64, arm64, ppc64le, s390x")]
pub struct UnknownArchitecture(pub String);

impl FromStr for Architecture {
    type Err = UnknownArchitecture;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Architecture::ALL
            .into_iter()
            .find(|arch| arch.as_str() == s)
            .ok_or_else(|| UnknownArchitecture(s.to_owned()))
    }
}

/// Schema: a string checked by CEL rather than an `enum`, so that the API server answers
/// a wrong value with one readable sentence that names the value.
impl JsonSchema for Architecture {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Architecture".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "maxLength": 16,
            "x-kubernetes-validations": [{
                "rule": format!("self in {ARCHITECTURE_LIST}"),
                "messageExpression": "'architecture \"' + self + '\" is not supported: use one of amd64, arm64, ppc64le, s390x'",
            }],
        })
    }
}

/// Serde helpers for `fallbackArchitecture`, where MTO writes "not set" as `""`.
pub mod empty_as_none {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    use super::Architecture;

    pub fn serialize<S: Serializer>(
        value: &Option<Architecture>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(value.map_or("", Architecture::as_str))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Architecture>, D::Error> {
        let raw = Option::<String>::deserialize(deserializer)?;
        match raw.as_deref() {
            None | Some("") => Ok(None),
            Some(name) => name.parse().map(Some).map_err(D::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_name_it_prints() {
        for arch in Architecture::ALL {
            assert_eq!(arch.as_str().parse::<Architecture>(), Ok(arch));
        }
    }

    #[test]
    fn rejects_unknown_names_with_a_readable_error() {
        let err = "x86_64".parse::<Architecture>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown architecture \"x86_64\": use one of amd64, arm64, ppc64le, s390x"
        );
    }
}
