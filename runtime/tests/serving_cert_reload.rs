//! The serving certificate follows its files: a pair replaced right after the first load,
//! before the watch has ever looked, is still picked up (the kubelet may swap a Secret's
//! files at any moment after a pod starts).
#![allow(clippy::unwrap_used)]

use std::{path::Path, time::Duration};

use multiarch_runtime::serving_cert::follow_files;

/// A self-signed pair for `name`, written as the kubelet does: new files, renamed over.
fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    for (file, text) in [("tls.crt", cert.pem()), ("tls.key", key.serialize_pem())] {
        let staged = dir.join(format!("{file}.new"));
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, dir.join(file)).unwrap();
    }
    cert.der().to_vec()
}

fn served(resolver: &multiarch_runtime::serving_cert::ReloadingCert) -> Vec<u8> {
    resolver.current().unwrap().cert[0].to_vec()
}

// One thread: the watch task cannot run before the test awaits, so the second pair is in
// place before it first looks, every time.
#[tokio::test(flavor = "current_thread")]
async fn a_pair_replaced_before_the_first_check_is_still_loaded() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let first = write_pair(dir.path(), "first.example");
    let resolver = follow_files(
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        Duration::from_millis(10),
    )
    .unwrap();
    assert_eq!(served(&resolver), first);
    let second = write_pair(dir.path(), "second.example");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while served(&resolver) != second {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replaced pair was never loaded"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
