//! `manifests/crds/` is exactly what the types generate.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;

use multiarch_crd::render;

const REGENERATE: &str =
    "regenerate with: cargo run -q --bin multiarch -- crds --dir manifests/crds";

#[test]
fn checked_in_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let crds = render::crds().unwrap();
    let mut expected_files: Vec<String> = crds.iter().map(render::file_name).collect();
    for crd in &crds {
        let path = dir.join(render::file_name(crd));
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e}); {REGENERATE}", path.display()));
        assert!(
            on_disk == render::to_yaml(crd).unwrap(),
            "{} differs from the generated CRD; {REGENERATE}",
            path.display()
        );
    }
    expected_files.push("kustomization.yaml".into());
    expected_files.sort();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, expected_files, "stale files in {}", dir.display());
}
