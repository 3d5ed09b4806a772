//! The layout keeps its promises: public type names are unique across the workspace, no
//! source file outside the tests is over 600 lines, modules do not import each other in
//! cycles, the node role's crate does not depend on the scheduler, the admission
//! webhook or the operator, and the placement policy's users not on the scheduler model.

#![allow(clippy::unwrap_used)]

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    path::{Path, PathBuf},
};

use multiarch_tests::files_with_extension;
use regex::Regex;

/// The crates whose sources are checked (the test-support crates under tests/ are not).
const CRATES: [&str; 13] = [
    "crd",
    "policy",
    "flags",
    "plugins",
    "inspector",
    "runtime",
    "scheduler",
    "admission",
    "ebpf",
    "enoexec",
    "operator",
    "audit",
    "cli",
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    files_with_extension(dir, "rs")
}

/// Test code: `tests.rs` files and everything from a `#[cfg(test)]` module on.
fn is_test_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
}

fn without_tests(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |i| &text[..i])
}

#[test]
fn public_type_names_are_unique_across_crates() {
    let definition =
        Regex::new(r"(?m)^\s*pub\s+(?:struct|enum|trait|type|union)\s+([A-Za-z0-9_]+)").unwrap();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for krate in CRATES {
        for path in sources(&workspace().join(krate).join("src")) {
            if is_test_file(&path) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for name in definition.captures_iter(without_tests(&text)) {
                seen.entry(name[1].to_owned())
                    .or_default()
                    .insert(krate.to_owned());
            }
        }
    }
    let shared: Vec<String> = seen
        .iter()
        .filter(|(_, crates)| crates.len() > 1)
        .map(|(name, crates)| format!("{name} in {crates:?}"))
        .collect();
    assert!(
        shared.is_empty(),
        "public types with the same name in several crates:\n{}",
        shared.join("\n")
    );
    assert!(seen.len() > 100, "found only {} public types", seen.len());
}

#[test]
fn no_source_file_outside_the_tests_is_over_600_lines() {
    let mut long = Vec::new();
    for krate in CRATES {
        for path in sources(&workspace().join(krate).join("src")) {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            if !is_test_file(&path) && lines > 600 {
                long.push(format!("{} ({lines} lines)", path.display()));
            }
        }
    }
    assert!(long.is_empty(), "split these files:\n{}", long.join("\n"));
}

/// A crate's modules, by path from the crate root (`["model", "pod"]`), with their text.
fn modules(src: &Path) -> BTreeMap<Vec<String>, String> {
    let mut out = BTreeMap::new();
    for path in sources(src) {
        if is_test_file(&path) {
            continue;
        }
        let relative = path.strip_prefix(src).unwrap().with_extension("");
        let mut module: Vec<String> = relative
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        if matches!(
            module.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            module.pop();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        out.insert(module, without_tests(&text).to_owned());
    }
    out
}

/// The paths a module names through `crate::`, `super::` and `self::`, made absolute.
fn named_paths(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let path = Regex::new(r"\b(crate|self|super(?:::super)*)::([A-Za-z0-9_:]*)(\{)?").unwrap();
    let mut out = Vec::new();
    for found in path.captures_iter(text) {
        let base: Vec<String> = match &found[1] {
            "crate" => Vec::new(),
            "self" => me.to_vec(),
            supers => me[..me.len().saturating_sub(supers.matches("super").count())].to_vec(),
        };
        let prefix: Vec<String> = found[2]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let mut full = base.clone();
        full.extend(prefix.iter().cloned());
        out.push(full.clone());
        // `crate::{a::X, b::{Y, Z}}`: every first-level entry of the group.
        if found.get(3).is_some() {
            let start = found.get(0).unwrap().end();
            let mut depth = 1;
            let mut entry = String::new();
            for c in text[start..].chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (depth == 1 && c == ',') {
                    let head: Vec<String> = entry
                        .split(['{', ' ', '\n'])
                        .find(|s| !s.is_empty())
                        .unwrap_or("")
                        .split("::")
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect();
                    let mut entry_path = full.clone();
                    entry_path.extend(head);
                    out.push(entry_path);
                    entry.clear();
                    if depth == 0 {
                        break;
                    }
                } else if depth >= 1 {
                    entry.push(c);
                }
            }
        }
    }
    out
}

/// The module a path lands in: its longest prefix that is a module.
fn module_of(path: &[String], modules: &BTreeMap<Vec<String>, String>) -> Vec<String> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains_key(p))
        .unwrap_or_default()
}

#[test]
fn modules_do_not_import_each_other_in_cycles() {
    let mut cycles = Vec::new();
    for krate in CRATES {
        let modules = modules(&workspace().join(krate).join("src"));
        // Edges between modules where neither contains the other (a child naming its
        // parent's items, or a parent its children's, is how Rust modules are built).
        let mut edges: HashMap<Vec<String>, BTreeSet<Vec<String>>> = HashMap::new();
        for (me, text) in &modules {
            for path in named_paths(text, me) {
                let target = module_of(&path, &modules);
                if target.starts_with(me) || me.starts_with(&target) {
                    continue;
                }
                edges.entry(me.clone()).or_default().insert(target);
            }
        }
        for start in modules.keys() {
            // A path from one of `start`'s targets back to `start`.
            let mut stack: Vec<(Vec<String>, Vec<Vec<String>>)> = edges
                .get(start)
                .into_iter()
                .flatten()
                .map(|t| (t.clone(), vec![start.clone(), t.clone()]))
                .collect();
            let mut visited = BTreeSet::new();
            while let Some((node, trail)) = stack.pop() {
                if node == *start {
                    cycles.push(format!(
                        "{krate}: {}",
                        trail
                            .iter()
                            .map(|m| m.join("::"))
                            .collect::<Vec<_>>()
                            .join(" -> ")
                    ));
                    break;
                }
                if !visited.insert(node.clone()) {
                    continue;
                }
                for next in edges.get(&node).into_iter().flatten() {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "modules that import each other:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    let modules: BTreeMap<Vec<String>, String> = [
        (vec!["a".into()], "use crate::b::B;".to_owned()),
        (vec!["b".into()], "use super::{a::A, c};".to_owned()),
        (vec!["c".into()], String::new()),
    ]
    .into();
    let a_names = named_paths(&modules[&vec!["a".to_owned()]], &["a".into()]);
    let b_names = named_paths(&modules[&vec!["b".to_owned()]], &["b".into()]);
    assert_eq!(module_of(&a_names[0], &modules), ["b"]);
    let b_targets: BTreeSet<Vec<String>> = b_names.iter().map(|p| module_of(p, &modules)).collect();
    assert!(b_targets.contains(&vec!["a".to_owned()]), "{b_names:?}");
    assert!(b_targets.contains(&vec!["c".to_owned()]), "{b_names:?}");
}

/// The crates a package depends on at run time (normal dependencies, transitively), as
/// cargo resolves them for the whole workspace.
fn runtime_dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Only this machine's platform: resolving every platform needs crates (Android's,
    // Windows') that an offline build never downloaded.
    let rustc = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .unwrap();
    let host = String::from_utf8(rustc.stdout)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("host: ").map(str::to_owned))
        .unwrap();
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host])
        .current_dir(workspace())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: HashMap<&str, &str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let nodes: HashMap<&str, &serde_json::Value> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    let root = names
        .iter()
        .find(|(_, name)| **name == package)
        .map(|(id, _)| *id)
        .unwrap();
    let mut seen = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            let dep_id = dep["pkg"].as_str().unwrap();
            if normal && seen.insert(names[dep_id].to_owned()) {
                stack.push(dep_id);
            }
        }
    }
    seen
}

#[test]
fn the_node_role_depends_on_no_cluster_role() {
    let dependencies = runtime_dependencies("multiarch-enoexec");
    for role in [
        "multiarch-scheduler",
        "multiarch-admission",
        "multiarch-operator",
    ] {
        assert!(
            !dependencies.contains(role),
            "multiarch-enoexec depends on {role}"
        );
    }
    assert!(dependencies.contains("multiarch-ebpf"));
    assert!(dependencies.contains("multiarch-runtime"));
}

/// The webhook, the gate controller, the audit and the inspector share the placement
/// policy (`multiarch-policy`), not the scheduler's cluster model and plugins.
#[test]
fn the_policy_users_depend_on_no_scheduler_model() {
    for package in [
        "multiarch-admission",
        "multiarch-audit",
        "multiarch-inspector",
    ] {
        let dependencies = runtime_dependencies(package);
        assert!(
            dependencies.contains("multiarch-policy"),
            "{package} does not use the policy crate"
        );
        for model in ["multiarch-plugins", "multiarch-scheduler"] {
            assert!(
                !dependencies.contains(model),
                "{package} depends on {model}"
            );
        }
    }
}

/// The operator writes each role's flags from their one definition (`multiarch-flags`),
/// which compiles none of the roles' code.
#[test]
fn the_role_flags_are_shared_without_the_roles() {
    assert!(runtime_dependencies("multiarch-operator").contains("multiarch-flags"));
    assert!(runtime_dependencies("multiarch").contains("multiarch-flags"));
    let dependencies = runtime_dependencies("multiarch-flags");
    for role in [
        "multiarch-scheduler",
        "multiarch-plugins",
        "multiarch-admission",
        "multiarch-inspector",
        "multiarch-enoexec",
        "multiarch-operator",
    ] {
        assert!(
            !dependencies.contains(role),
            "multiarch-flags depends on {role}"
        );
    }
}
