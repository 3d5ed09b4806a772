//! Files generated from the code and checked in (docs pages, reference tables): a test
//! holds the checked-in file to what the code generates now, and `MULTIARCH_BLESS=1`
//! writes it first, so regenerating is running that test once.

use std::path::Path;

/// Asserts that the file at `path` is `generated`, what the code makes of `source`;
/// with `MULTIARCH_BLESS` set, writes it first. `regenerate` is the command that does.
pub fn assert_generated(path: &Path, generated: &str, source: &str, regenerate: &str) {
    if std::env::var_os("MULTIARCH_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == generated,
        "{} differs from {source}; regenerate with: MULTIARCH_BLESS=1 {regenerate}",
        path.display()
    );
}
