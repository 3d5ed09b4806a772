//! `multiarch certificates`: the Secrets an install without the operator mounts (the
//! webhook's, the inspector's and its callers'), in the namespace asked for, from one CA
//! whose bundle is also written for the webhook configuration's `caBundle`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::process::Command;

use base64::Engine;

#[test]
fn the_certificates_command_prints_every_secret_from_one_ca() {
    let dir = tempfile::tempdir().unwrap();
    let bundle_file = dir.path().join("ca-bundle.b64");
    let output = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["certificates", "--namespace", "tools", "--ca-bundle"])
        .arg(&bundle_file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let secrets: Vec<serde_json::Value> = text
        .split("\n---\n")
        .map(|doc| serde_yaml_ng::from_str(doc).unwrap())
        .collect();
    let names: Vec<&str> = secrets
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "multiarch-webhook-tls",
            "multiarch-inspector-tls",
            "multiarch-inspector-client"
        ]
    );
    let bundle = std::fs::read_to_string(&bundle_file).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let ca_pem = String::from_utf8(b64.decode(bundle.trim()).unwrap()).unwrap();
    assert!(
        ca_pem.starts_with("-----BEGIN CERTIFICATE-----"),
        "{ca_pem}"
    );
    for secret in &secrets {
        assert_eq!(secret["kind"], "Secret");
        assert_eq!(secret["type"], "kubernetes.io/tls");
        assert_eq!(secret["metadata"]["namespace"], "tools");
        let data = |key: &str| {
            String::from_utf8(b64.decode(secret["data"][key].as_str().unwrap()).unwrap()).unwrap()
        };
        assert_eq!(
            data("ca.crt"),
            ca_pem,
            "every certificate trusts the one CA"
        );
        assert!(data("tls.crt").starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(data("tls.key").contains("PRIVATE KEY"));
    }
}
