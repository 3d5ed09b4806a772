//! `multiarch crds` prints exactly the checked-in CRDs, so `multiarch crds | diff - ...`
//! is empty on a clean checkout.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{path::Path, process::Command};

#[test]
fn crds_command_prints_the_checked_in_manifests() {
    let output = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).unwrap();

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 3);
    let checked_in: String = files
        .iter()
        .map(|f| format!("---\n{}", std::fs::read_to_string(f).unwrap()))
        .collect();
    assert_eq!(printed, checked_in);
}

#[test]
fn crds_command_writes_one_file_per_crd() {
    let dir = std::env::temp_dir().join(format!("multiarch-crds-{}", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["crds", "--dir"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(status.success());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "multiarch.openshift.io_clusterpodplacementconfigs.yaml",
            "multiarch.openshift.io_enoexecevents.yaml",
            "multiarch.openshift.io_podplacementconfigs.yaml",
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unwritable_directory_is_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["crds", "--dir", "/proc/multiarch-cannot-exist"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error: cannot create /proc/multiarch-cannot-exist"),
        "{stderr}"
    );
}
