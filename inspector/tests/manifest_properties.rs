//! Property tests: the manifest and config parsers never panic on any bytes, and
//! well-formed indexes always give back the platforms they list.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_inspector::manifest::{Parsed, parse_config, parse_manifest};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048), ct in proptest::option::of("[a-z/.+-]{0,40}")) {
        let _ = parse_manifest(&bytes, ct.as_deref());
        let _ = parse_config(&bytes);
    }

    #[test]
    fn json_shaped_garbage_never_panics(
        media_type in prop_oneof![
            Just("application/vnd.oci.image.index.v1+json".to_owned()),
            Just("application/vnd.docker.distribution.manifest.v2+json".to_owned()),
            "[a-z./+]{0,30}",
        ],
        manifests in proptest::collection::vec((any::<Option<String>>(), any::<Option<String>>(), any::<Option<String>>(), any::<bool>()), 0..8),
    ) {
        let entries: Vec<serde_json::Value> = manifests
            .iter()
            .map(|(os, arch, variant, attest)| {
                let mut e = serde_json::json!({"digest": "sha256:x", "platform": {"os": os, "architecture": arch, "variant": variant}});
                if *attest {
                    e["annotations"] = serde_json::json!({"vnd.docker.reference.type": "attestation-manifest"});
                }
                e
            })
            .collect();
        let doc = serde_json::json!({"mediaType": media_type, "manifests": entries, "config": null});
        let _ = parse_manifest(&serde_json::to_vec(&doc).unwrap(), None);
    }

    #[test]
    fn well_formed_indexes_round_trip(archs in proptest::collection::vec(prop_oneof![Just("amd64"), Just("arm64"), Just("ppc64le"), Just("s390x"), Just("riscv64")], 1..6)) {
        let entries: Vec<serde_json::Value> = archs
            .iter()
            .enumerate()
            .map(|(i, a)| serde_json::json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{i}"), "size": 1, "platform": {"os": "linux", "architecture": a}}))
            .collect();
        let doc = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": entries});
        let Parsed::Index(parsed) = parse_manifest(&serde_json::to_vec(&doc).unwrap(), None).unwrap() else {
            panic!("not an index");
        };
        let got: Vec<String> = parsed.iter().map(|e| e.platform.as_ref().unwrap().architecture.clone()).collect();
        prop_assert_eq!(got, archs.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>());
    }
}
