//! `docs/reference/crds.md` is what the generated CRDs declare, field by field.
//! Regenerate with `MULTIARCH_BLESS=1 cargo test -p multiarch-crd --test reference`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;

use multiarch_crd::{reference::reference, render};
use multiarch_test_support::generated::assert_generated;

#[test]
fn the_crd_reference_is_generated_from_the_crds() {
    let generated = reference(&render::crds().unwrap());
    for field in [
        "`spec.placement.mode`",
        "`spec.plugins.celArchitecturePlacement.rules[].expression`",
    ] {
        assert!(generated.contains(field), "no {field}");
    }
    assert_generated(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/crds.md"),
        &generated,
        "the CRDs",
        "cargo test -p multiarch-crd --test reference",
    );
}
