//! The documentation holds together: the README stays a front door (under 400 lines) that
//! links every page of `docs/`, and every relative link of the README, CONTRIBUTING.md and
//! `docs/` leads to a file that exists and, for a `#section`, to a heading it has.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use multiarch_tests::files_with_extension;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every Markdown page: the README, CONTRIBUTING.md and `docs/**`.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md"), repo().join("CONTRIBUTING.md")];
    pages.extend(files_with_extension(&repo().join("docs"), "md"));
    pages.sort();
    pages
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces
/// as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of a page's Markdown links `](target)` outside code blocks and code spans.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Code spans may hold `](` of their own.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_leads_somewhere() {
    let mut checked = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") {
                continue;
            }
            let (file, section) = link.split_once('#').unwrap_or((link.as_str(), ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                target.exists(),
                "{}: the link {link} leads to no file",
                page.display()
            );
            if !section.is_empty() {
                let headings = anchors(&std::fs::read_to_string(&target).unwrap());
                assert!(
                    headings.contains(section),
                    "{}: the link {link}: {} has no heading #{section}",
                    page.display(),
                    target.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked > 30, "only {checked} links found");
}

#[test]
fn the_readme_is_a_front_door_that_links_every_page() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 400,
        "README.md has {lines} lines: move detail to docs/"
    );
    let linked: BTreeSet<String> = links(&readme).into_iter().collect();
    for page in pages() {
        let relative = page
            .strip_prefix(repo())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if relative == "README.md" {
            continue;
        }
        assert!(
            linked.contains(&relative),
            "README.md does not link {relative}"
        );
    }
}

#[test]
fn anchors_and_links_are_read_as_github_reads_them() {
    assert_eq!(
        anchor(" Architecture rules: `celArchitecturePlacement`"),
        "architecture-rules-celarchitectureplacement"
    );
    assert_eq!(anchor("The image"), "the-image");
    assert_eq!(
        links("see [a](docs/a.md#x) and `[b](not-a-link)`, [c](c.md)\n```\n[d](d.md)\n```"),
        ["docs/a.md#x", "c.md"]
    );
}
