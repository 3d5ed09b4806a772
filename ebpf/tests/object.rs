//! The compiled kernel program, parsed with aya-obj without loading it: the programs the
//! loader attaches, in tracepoint sections, and the maps it opens, with the right types.
#![allow(clippy::unwrap_used)]

use aya_obj::{Object, ProgramSection};
use multiarch_ebpf::probe::{self, PROGRAMS};

const BPF_MAP_TYPE_HASH: u32 = 1;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_MAP_TYPE_RINGBUF: u32 = 27;

fn object() -> Object {
    let bytes = probe::object().expect("built without the eBPF program: install clang");
    Object::parse(bytes).unwrap()
}

#[test]
fn every_attached_program_is_a_tracepoint_program() {
    let object = object();
    let mut names: Vec<&str> = object.programs.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut expected: Vec<&str> = PROGRAMS.iter().map(|(program, _)| *program).collect();
    expected.sort_unstable();
    assert_eq!(names, expected);
    for (name, program) in &object.programs {
        assert!(
            matches!(program.section, ProgramSection::TracePoint),
            "{name}"
        );
        // GPL-compatible, or the kernel refuses bpf_probe_read_user_str and friends.
        assert!(program.license.to_str().unwrap().contains("GPL"), "{name}");
    }
}

#[test]
fn maps_have_the_types_the_loader_expects() {
    let object = object();
    let map = |name: &str| {
        object
            .maps
            .get(name)
            .unwrap_or_else(|| panic!("no map {name}"))
    };
    assert_eq!(map("events").map_type(), BPF_MAP_TYPE_RINGBUF);
    assert_eq!(map("events").max_entries(), 256 * 1024);
    assert_eq!(map("lost_events").map_type(), BPF_MAP_TYPE_ARRAY);
    assert_eq!(map("pending_execs").map_type(), BPF_MAP_TYPE_HASH);
}

#[test]
fn carries_btf_for_core_relocations() {
    // Without BTF the task_struct field reads cannot be relocated to the running kernel.
    assert!(object().btf.is_some());
}
