//! What the exec-format-error probe costs every other exec on a node: `fork+exec` of
//! /bin/true without the probe, then with it attached (its enter/exit tracepoints run on
//! every exec; only failures with ENOEXEC write to the ring buffer). Needs root or
//! CAP_BPF + CAP_PERFMON; where the kernel refuses, the bench says "SKIPPED".
//! Run: `cargo bench -p multiarch-benches --bench enoexec_probe`.

use std::{hint::black_box, io::Write, process::Command, time::Duration};

use criterion::{Criterion, criterion_group, criterion_main};
use multiarch_ebpf::probe::ExecProbe;

fn exec_true() {
    let status = Command::new("/bin/true")
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    black_box(status);
}

fn exec_overhead(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let mut group = c.benchmark_group("enoexec");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("exec_true/without_probe", |b| b.iter(exec_true));
    let probe = runtime.block_on(async { ExecProbe::attach() });
    match probe {
        Ok(_probe) => {
            group.bench_function("exec_true/with_probe", |b| b.iter(exec_true));
        }
        Err(e) => {
            assert!(
                std::env::var_os("MULTIARCH_REQUIRE_KERNEL_TESTS").is_none(),
                "kernel tests are required here: {e}"
            );
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: enoexec/exec_true/with_probe: the kernel refused the eBPF program: {e}"
            );
        }
    }
    group.finish();
}

criterion_group!(benches, exec_overhead);
criterion_main!(benches);
