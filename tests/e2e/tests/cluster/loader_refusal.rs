//! The case "loader refusals": a real container whose program glibc's real loader refuses
//! to start on the node's CPU is reported on its pod (`CPULevelTooLow`), as the exec
//! format errors are. The program is the host's `/bin/true` with its
//! `GNU_PROPERTY_X86_ISA_1_NEEDED` note asking for a level bit above x86-64-v4, which no
//! CPU has: the loader (the host's, shipped in the image with its libc) prints `CPU ISA
//! level is lower than required` and exits with 127 on any x86-64 node, so the case does
//! not depend on how old this machine's CPU is.

use std::{path::Path, process::Command, time::Duration};

use anyhow::{Context, bail, ensure};
use multiarch_e2e::{
    pods::{self, wait_event},
    tier::Tier,
    wait::{self, Check},
};
use serde_json::json;

use crate::node_level::glibc_level;

pub const NS_LOADER: &str = "e2e-loader";
const POD: &str = "refused";
const EVENT: Duration = Duration::from_secs(180);
/// `GNU_PROPERTY_X86_ISA_1_NEEDED` and its 4-byte size, as they open the property.
const ISA_NEEDED: [u8; 8] = [0x02, 0x80, 0x00, 0xc0, 0x04, 0x00, 0x00, 0x00];
/// The bit above x86-64-v4's (0x8): needed by the patched program, had by no CPU.
const BEYOND_V4: u32 = 0x10;

/// The host's `/bin/true`, its ISA note asking for a level beyond x86-64-v4.
fn refused_program(into: &Path) -> anyhow::Result<()> {
    let mut elf = std::fs::read("/bin/true").context("cannot read /bin/true")?;
    let at = elf
        .windows(ISA_NEEDED.len())
        .position(|w| w == ISA_NEEDED)
        .context("/bin/true has no x86 ISA-needed note (built without GNU properties)")?;
    let value = at + ISA_NEEDED.len();
    let mut bits = [0u8; 4];
    bits.copy_from_slice(&elf[value..value + 4]);
    let needed = u32::from_le_bytes(bits) | BEYOND_V4;
    elf[value..value + 4].copy_from_slice(&needed.to_le_bytes());
    std::fs::write(into, elf)?;
    Ok(())
}

/// Builds and pushes the image (the kit's mkimage.py: the program at /bin/app, the host's
/// loader and libc beside it); its reference.
fn push_image(tier: &Tier, mkimage: &Path) -> anyhow::Result<String> {
    let (registry, _) = tier.test_images.registry_and_repository()?;
    let image = format!("{registry}/test/loader-refused:1");
    let dir = tier.work.join("loader-refused");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let program = dir.join("app");
    refused_program(&program)?;
    let libc = std::fs::canonicalize("/lib/x86_64-linux-gnu/libc.so.6")?;
    let loader = std::fs::canonicalize("/lib64/ld-linux-x86-64.so.2")?;
    let out = Command::new("python3")
        .arg(mkimage)
        .arg(dir.join("layout"))
        .arg("amd64")
        .arg(format!("{}:/bin/app", program.display()))
        .arg(format!("{}:/lib64/ld-linux-x86-64.so.2", loader.display()))
        .arg(format!(
            "{}:/lib/x86_64-linux-gnu/libc.so.6",
            libc.display()
        ))
        .args(["--entrypoint", r#"["/bin/app"]"#, "--push", &image])
        .output()
        .context("cannot run mkimage.py")?;
    ensure!(
        out.status.success(),
        "mkimage.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(image)
}

pub fn loader_refusals(tier: &Tier) -> anyhow::Result<()> {
    let (node, arch) = tier.a_node()?;
    if arch != "amd64" || std::env::consts::ARCH != "x86_64" {
        println!(
            "SKIPPED: e2e loader refusals: the node is {arch} and this machine {}, not amd64",
            std::env::consts::ARCH
        );
        return Ok(());
    }
    let Some(mkimage) = std::env::var_os("MULTIARCH_E2E_MKIMAGE") else {
        println!(
            "SKIPPED: e2e loader refusals: MULTIARCH_E2E_MKIMAGE (the kit's mkimage.py, set by scripts/e2e) is not set"
        );
        return Ok(());
    };
    let image = push_image(tier, Path::new(&mkimage))?;
    // Placement is bypassed (an excluded namespace, nodeName): the program really starts
    // on the node and the loader refuses it.
    tier.namespace(
        NS_LOADER,
        json!({"multiarch.openshift.io/exclude-pod-placement": "true"}),
    )?;
    let mut pod = pods::sleeper(NS_LOADER, POD, &image);
    pod["spec"]["nodeName"] = json!(node);
    pod["spec"]["containers"][0]
        .as_object_mut()
        .context("the sleeper has no container")?
        .remove("command");
    tier.kubectl.apply(&pod.to_string())?;

    let (from, message) = wait_event(&tier.kubectl, NS_LOADER, POD, "CPULevelTooLow", EVENT)?;
    ensure!(
        from == "multiarch-enoexec-handler",
        "CPULevelTooLow from {from}"
    );
    let level = glibc_level()?;
    let expected = format!(
        "container app (image {image}) cannot start on this node: glibc's loader refused its CPU (/bin/app: CPU ISA level is lower than required); the node is x86-64-{level}, the level its program needs was not read from the image (binaryInspection reads it)"
    );
    if message != expected {
        bail!("CPULevelTooLow says {message:?}, not {expected:?}");
    }
    // The container really exited with the loader's status. The daemon saw the exit at
    // once; the kubelet writes it into the pod's status at its next relist, which can
    // come after the report.
    let exit = wait::until("the container's exit in its pod's status", EVENT, || {
        let status = pods::get(&tier.kubectl, NS_LOADER, POD)?;
        let exit = status
            .pointer("/status/containerStatuses/0/lastState/terminated/exitCode")
            .or_else(|| status.pointer("/status/containerStatuses/0/state/terminated/exitCode"))
            .and_then(serde_json::Value::as_i64);
        Ok(match exit {
            Some(code) => Check::Done(code),
            None => Check::NotYet("no exit code yet".into()),
        })
    })?;
    ensure!(exit == 127, "the container's exit code is {exit}");
    println!("e2e: {NS_LOADER}/{POD} on {node}: {message}");
    tier.delete_namespace(NS_LOADER)
}
