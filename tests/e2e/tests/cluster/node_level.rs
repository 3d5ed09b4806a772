//! The case "x86-64 level label": the exec-format-error daemon labels its (real) node with
//! the level glibc's loader finds on this CPU, writes it back when an admin removes it,
//! and the admission policy refuses the daemon's ServiceAccount any other node write.

use std::time::Duration;

use anyhow::{Context, ensure};
use multiarch_e2e::{tier::Tier, wait};

const LABEL: &str = "multiarch.openshift.io/arch-variant";
const DAEMON: &str = "system:serviceaccount:multiarch:multiarch-enoexec-daemon";
const WAIT: Duration = Duration::from_secs(120);

/// The highest x86-64 level glibc's loader lists as supported on this machine (the kit's
/// node is this machine): `ld.so --help`, glibc 2.33 or later.
pub fn glibc_level() -> anyhow::Result<String> {
    let out = std::process::Command::new("/lib64/ld-linux-x86-64.so.2")
        .arg("--help")
        .output()
        .context("cannot run glibc's loader")?;
    let help = String::from_utf8_lossy(&out.stdout);
    let level = (2..=4)
        .filter(|l| help.contains(&format!("x86-64-v{l} (supported")))
        .max()
        .unwrap_or(1);
    Ok(format!("v{level}"))
}

fn label_of(tier: &Tier, node: &str) -> anyhow::Result<String> {
    let node = tier.kubectl.json(&["get", "node", node])?;
    Ok(node["metadata"]["labels"][LABEL]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

pub fn x86_64_level_label(tier: &Tier) -> anyhow::Result<()> {
    let (node, arch) = tier.a_node()?;
    if arch != "amd64" {
        println!("SKIPPED: e2e x86-64 level label: the node is {arch}, not amd64");
        return Ok(());
    }
    let level = glibc_level()?;
    let labelled = |what: &str| {
        wait::until_true(what, WAIT, || {
            let seen = label_of(tier, &node)?;
            Ok((seen == level, format!("label {seen:?}")))
        })
    };
    labelled(&format!("node {node} labelled {level}"))?;

    // An admin removes it: the daemon writes it back.
    tier.kubectl
        .run(&["label", "node", &node, &format!("{LABEL}-")])?;
    labelled(&format!("node {node} labelled {level} again"))?;

    // The daemon's ServiceAccount without a token bound to the node (impersonated here):
    // refused by the admission policy, whatever it writes.
    for change in [format!("{LABEL}=v1"), "team=mine".to_owned()] {
        let out = tier.kubectl.output(
            &[
                "--as",
                DAEMON,
                "label",
                "node",
                &node,
                &change,
                "--overwrite",
            ],
            "",
            Duration::from_secs(30),
        )?;
        ensure!(
            !out.success
                && out
                    .stderr
                    .contains("multiarch-enoexec-daemon may label only the node it runs on"),
            "the daemon's account wrote {change} on {node} without its node's token: {}",
            out.stderr.trim()
        );
    }
    ensure!(label_of(tier, &node)? == level, "the label changed");
    println!("e2e: node {node} carries {LABEL}={level}, the level glibc finds on its CPU");
    Ok(())
}
