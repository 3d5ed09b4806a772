//! `docs/reference/crds.md` is what the generated CRDs declare, field by field.
//! Regenerate with `MULTIARCH_BLESS=1 cargo test -p multiarch-crd --test reference`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;

use multiarch_crd::{reference::reference, render};

#[test]
fn the_crd_reference_is_generated_from_the_crds() {
    let generated = reference(&render::crds().unwrap());
    for field in [
        "`spec.placement.mode`",
        "`spec.plugins.celArchitecturePlacement.rules[].expression`",
    ] {
        assert!(generated.contains(field), "no {field}");
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/crds.md");
    if std::env::var_os("MULTIARCH_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} differs from the CRDs; regenerate with: MULTIARCH_BLESS=1 cargo test -p multiarch-crd --test reference",
        path.display()
    );
}
