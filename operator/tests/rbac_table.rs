//! The RBAC table of docs/security.md is the one generated from the manifests' roles (which the
//! manifests test holds to the code the operator applies): a role change that does not
//! reach the page fails here, with the table to paste.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_operator::install::rbac_table::{BEGIN, END, rbac_table};

#[test]
fn the_security_page_rbac_table_matches_the_roles() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/security.md"))
            .unwrap();
    let start = readme
        .find(BEGIN)
        .expect("docs/security.md has no RBAC table marker")
        + BEGIN.len();
    let end = readme[start..]
        .find(END)
        .expect("the RBAC table has no end marker")
        + start;
    let expected = rbac_table().unwrap();
    assert!(
        readme[start..end].trim() == expected.trim(),
        "docs/security.md's RBAC table differs from the roles; put this between its markers:\n{expected}"
    );
}
