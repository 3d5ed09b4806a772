//! The README's commands, as the tier runs them: a fenced `sh` block right after a line
//! `<!-- e2e: NAME -->` is run word for word, so the quick start a user copies is the one
//! the tier checked.

use std::{path::Path, process::Command};

use anyhow::{Context, bail};

/// The block marked `name` in the README at `path`.
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

    /// The tier runs these (tests/cluster.rs): a README edit that loses one fails here,
    /// on machines without a cluster too.
    #[test]
    fn the_readme_has_every_block_the_tier_runs() {
        let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
        for name in [
            "install",
            "registries",
            "runtime-socket",
            "configure",
            "uninstall",
        ] {
            let script = block(&readme, name).unwrap();
            assert!(script.contains("kubectl"), "{name}: {script}");
        }
        // The install sets the image it is given, not a fixed one.
        assert!(block(&readme, "install").unwrap().contains("${IMAGE"));
    }
}
