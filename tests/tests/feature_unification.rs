//! The full binary and the node daemon's binary ask every shared dependency for the same
//! features (`workspace-hack/`), so that building both images compiles the dependencies
//! once. Fails naming the dependencies that differ, and what to add to the hack crate.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// Every package of one build of the multiarch binary with the features cargo resolves for
/// it, one line each (`name version [features]`), for this machine's platform only (an
/// offline build never downloaded other platforms' crates).
fn resolved_features(feature_args: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "--offline", "--locked", "-p", "multiarch"])
        .args(feature_args)
        .args(["-e", "normal,build", "--prefix", "none", "--no-dedupe"])
        .args(["-f", "{p} [{f}]"])
        .current_dir(workspace())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

fn package_of(line: &str) -> &str {
    line.split(" [").next().unwrap_or(line)
}

#[test]
fn the_node_build_shares_every_dependencys_features_with_the_full_build() {
    let full = resolved_features(&[]);
    let node = resolved_features(&["--no-default-features", "--features", "enoexec-daemon"]);
    // The crates whose own code differs by the roles compiled in; each is small.
    let own_code = ["multiarch v", "multiarch-enoexec v"];
    let differing: Vec<String> = node
        .difference(&full)
        .filter(|line| !own_code.iter().any(|own| line.starts_with(own)))
        .map(|line| {
            let wanted: Vec<&String> = full
                .iter()
                .filter(|f| package_of(f) == package_of(line))
                .collect();
            format!("{line}\n    the full build: {wanted:?}")
        })
        .collect();
    assert!(
        differing.is_empty(),
        "the node build resolves these dependencies with other features than the full \
         build, so building both images compiles everything above them twice; ask for the \
         full build's features in workspace-hack/Cargo.toml (proc macros' dependencies as \
         build dependencies):\n{}",
        differing.join("\n")
    );
}

/// A package is named by its name and version (and kind), whatever its features.
#[test]
fn package_names_are_compared_without_their_features() {
    assert_eq!(
        package_of("serde_json v1.0.154 [alloc,default,std]"),
        "serde_json v1.0.154"
    );
    assert_eq!(
        package_of("displaydoc v0.2.7 (proc-macro) []"),
        "displaydoc v0.2.7 (proc-macro)"
    );
}
