//! Helpers shared by the crd tests: fixtures and the generated schemas.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use multiarch_crd::render;
use serde_json::Value;

pub fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

pub fn read_yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `openAPIV3Schema` the generated CRD serves for this object's apiVersion and kind.
pub fn schema_for(object: &Value) -> Value {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap();
    let kind = object["kind"].as_str().unwrap();
    let crd = render::crds()
        .unwrap()
        .into_iter()
        .find(|crd| crd.spec.group == group && crd.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {api_version} {kind}"));
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == version)
        .unwrap_or_else(|| panic!("{kind} does not serve {version}"));
    serde_json::to_value(
        version
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}
