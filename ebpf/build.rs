//! Builds the two generated inputs of this crate:
//! - the CRI `runtime.v1` gRPC client from `proto/` (protox: pure Rust, no system protoc);
//! - the eBPF object from `src/bpf/enoexec.bpf.c` with clang (`-target bpfel|bpfeb`).
//!
//! clang is needed only for the node daemon. Without it the build still succeeds (so
//! `multiarch simulate` works on a bare machine) and the daemon refuses to start with a
//! message naming the missing compiler; `MULTIARCH_EBPF_REQUIRED=1` (set by `scripts/test`
//! and the container build) turns that into a build error instead.

use std::{env, path::PathBuf, process::Command};

const BPF_SOURCE: &str = "src/bpf/enoexec.bpf.c";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/cri_runtime_v1.proto");
    let descriptors = protox::compile(["proto/cri_runtime_v1.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .compile_fds(descriptors)?;

    let out = PathBuf::from(env::var("OUT_DIR")?).join("enoexec.bpf.o");
    if let Err(why) = compile_bpf(&out) {
        if env::var("MULTIARCH_EBPF_REQUIRED").is_ok_and(|v| v == "1") {
            return Err(format!("building the eBPF program: {why}").into());
        }
        println!(
            "cargo:warning=eBPF program not built ({why}); `multiarch enoexec-daemon` will refuse to start. Install clang and libbpf-dev to build it."
        );
        std::fs::write(&out, [])?;
    }
    Ok(())
}

fn compile_bpf(out: &std::path::Path) -> Result<(), String> {
    println!("cargo:rerun-if-changed={BPF_SOURCE}");
    println!("cargo:rerun-if-env-changed=CLANG");
    println!("cargo:rerun-if-env-changed=MULTIARCH_EBPF_REQUIRED");
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let arch = env::var("CARGO_CFG_TARGET_ARCH").map_err(|e| e.to_string())?;
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN").map_err(|e| e.to_string())?;
    // linux/bpf.h includes <asm/types.h>, which Debian keeps under the multiarch triplet.
    let triplet = match arch.as_str() {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "powerpc64" => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        other => return Err(format!("no include path known for target arch {other}")),
    };
    let target = if endian == "big" { "bpfeb" } else { "bpfel" };
    let output = Command::new(&clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", target])
        .arg(format!("-I/usr/include/{triplet}"))
        .args(["-c", BPF_SOURCE, "-o"])
        .arg(out)
        .output()
        .map_err(|e| format!("running {clang}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{clang} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(())
}
