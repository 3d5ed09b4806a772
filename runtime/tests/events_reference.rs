//! `docs/reference/events.md` is the table of event reasons the components publish.
//! Regenerate with `MULTIARCH_BLESS=1 cargo test -p multiarch-runtime --test events_reference`.

use std::path::Path;

use multiarch_runtime::event_reason::{EventReason, reference};
use multiarch_test_support::generated::assert_generated;

#[test]
fn the_event_reference_is_generated_from_the_reason_table() {
    let generated = reference();
    for reason in EventReason::ALL {
        assert!(
            generated.contains(&format!("| `{}` |", reason.as_str())),
            "{reason:?} has no row"
        );
    }
    assert_generated(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/events.md"),
        &generated,
        "the event reasons",
        "cargo test -p multiarch-runtime --test events_reference",
    );
}
