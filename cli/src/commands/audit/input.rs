//! Manifests from files, a directory or standard input.

use std::{io::Read, path::Path};

use anyhow::Context;
use multiarch_audit::workloads::Manifests;

/// Adds the workloads of `path` (a file, a directory's .yaml/.yml/.json files, or `-`).
pub fn read_input(path: &Path, namespace: &str, manifests: &mut Manifests) -> anyhow::Result<()> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read standard input")?;
        return manifests
            .add_text(&text, namespace)
            .context("standard input");
    }
    let mut files = Vec::new();
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {}", path.display()))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        entries.sort();
        files.extend(entries);
    } else {
        files.push(path.to_owned());
    }
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        manifests
            .add_text(&text, namespace)
            .with_context(|| file.display().to_string())?;
    }
    Ok(())
}
