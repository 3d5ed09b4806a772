//! The documentation's commands, as the tier runs them: a fenced `sh` block right after a
//! line `<!-- e2e: NAME -->`, in the README or a page of `docs/`, is run word for word, so
//! the install a user copies is the one the tier checked.

use std::{path::Path, process::Command};

use anyhow::{Context, bail};

/// The block marked `name` in the checkout at `repo`: in `README.md` or one of `docs/`,
/// and in exactly one of them (two copies could drift apart).
pub fn find_block(repo: &Path, name: &str) -> anyhow::Result<String> {
    let mut files = vec![repo.join("README.md")];
    let docs = repo.join("docs");
    let mut pages: Vec<_> = std::fs::read_dir(&docs)
        .with_context(|| format!("cannot read {}", docs.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    let marker = format!("<!-- e2e: {name} -->");
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        if text.lines().any(|l| l.trim() == marker) {
            found.push((file, block(file, name)?));
        }
    }
    match found.len() {
        1 => Ok(found.remove(0).1),
        0 => bail!("no {marker} in the README or docs/"),
        _ => bail!(
            "{marker} in more than one page: {:?}",
            found.iter().map(|(f, _)| f).collect::<Vec<_>>()
        ),
    }
}

/// The block marked `name` in the page at `path`.
pub fn block(path: &Path, name: &str) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    block_in(&text, name).with_context(|| format!("{}: block <!-- e2e: {name} -->", path.display()))
}

fn block_in(text: &str, name: &str) -> anyhow::Result<String> {
    let marker = format!("<!-- e2e: {name} -->");
    let mut lines = text.lines().skip_while(|l| l.trim() != marker);
    if lines.next().is_none() {
        bail!("no such marker");
    }
    if lines.next().map(str::trim) != Some("```sh") {
        bail!("the marker is not followed by a ```sh block");
    }
    let mut block = String::new();
    for line in lines {
        if line.trim() == "```" {
            return Ok(block);
        }
        block.push_str(line);
        block.push('\n');
    }
    bail!("the block is not closed")
}

/// Runs `script` with bash (`-euo pipefail`, so the first failing command fails it) in
/// `dir`, with `env` added; its output goes to the tier's, since a user would see it.
pub fn run(script: &str, dir: &Path, env: &[(&str, &str)]) -> anyhow::Result<()> {
    let mut command = Command::new("bash");
    command
        .arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(script)
        .current_dir(dir);
    for (key, value) in env {
        command.env(key, value);
    }
    let status = command.status().context("cannot run bash")?;
    if !status.success() {
        bail!("the README's commands failed ({status}):\n{script}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_marked_block_and_only_it() {
        let text = "intro\n```sh\nnot this\n```\n<!-- e2e: install -->\n```sh\nkubectl apply -k x/\nkubectl get cppc\n```\nafter\n";
        assert_eq!(
            block_in(text, "install").unwrap(),
            "kubectl apply -k x/\nkubectl get cppc\n"
        );
        assert!(block_in(text, "uninstall").is_err());
        assert!(block_in("<!-- e2e: a -->\ntext\n", "a").is_err());
        assert!(block_in("<!-- e2e: a -->\n```sh\nopen\n", "a").is_err());
    }

    /// The tier runs these (tests/cluster.rs): a documentation edit that loses one, or
    /// copies one, fails here, on machines without a cluster too.
    #[test]
    fn the_docs_have_every_block_the_tier_runs_once() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for name in [
            "install",
            "registries",
            "runtime-socket",
            "pod-logs-dir",
            "configure",
            "uninstall",
        ] {
            let script = find_block(&repo, name).unwrap();
            assert!(script.contains("kubectl"), "{name}: {script}");
        }
        // The install sets the image it is given, not a fixed one.
        assert!(find_block(&repo, "install").unwrap().contains("${IMAGE"));
        assert!(find_block(&repo, "no-such-block").is_err());
    }
}
