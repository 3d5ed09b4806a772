use super::*;

/// One tar entry: a file with contents, a directory, a symbolic or a hard link.
enum E<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    Link(&'a str, &'a str),
    Hard(&'a str, &'a str),
}

fn layer(entries: &[E<'_>]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o755);
        match entry {
            E::File(path, data) => {
                header.set_size(data.len() as u64);
                header.set_entry_type(tar::EntryType::Regular);
                builder.append_data(&mut header, path, *data).unwrap();
            }
            E::Dir(path) => {
                header.set_size(0);
                header.set_entry_type(tar::EntryType::Directory);
                builder.append_data(&mut header, path, &[][..]).unwrap();
            }
            E::Link(path, target) | E::Hard(path, target) => {
                header.set_size(0);
                header.set_entry_type(if matches!(entry, E::Link(..)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                });
                builder.append_link(&mut header, path, target).unwrap();
            }
        }
    }
    builder.into_inner().unwrap()
}

fn merged(layers: &[Vec<u8>], bare_name: Option<&str>) -> MergedLinks {
    let mut links = MergedLinks::new(LookupLimits::default(), bare_name);
    for layer in layers {
        links.add_layer(layer.as_slice()).unwrap();
    }
    links
}

#[test]
fn the_config_names_the_program_the_runtime_starts() {
    // (config, program, search path, working dir, candidates)
    let cases = [
        (
            r#"{"config": {"Entrypoint": ["/app/server", "--port"], "Cmd": ["x"]}}"#,
            "/app/server",
            DEFAULT_PATH,
            "/",
            vec!["/app/server"],
        ),
        (
            r#"{"config": {"Cmd": ["sh"], "Env": ["A=1", "PATH=/opt/bin:/bin"]}}"#,
            "sh",
            "/opt/bin:/bin",
            "/",
            vec!["/opt/bin/sh", "/bin/sh"],
        ),
        (
            r#"{"config": {"Entrypoint": null, "Cmd": ["./run", "a"], "WorkingDir": "/srv/app/"}}"#,
            "./run",
            DEFAULT_PATH,
            "/srv/app/",
            vec!["/srv/app/run"],
        ),
        (
            r#"{"config": {"Entrypoint": [], "Cmd": ["../tool"], "WorkingDir": "/srv/app"}}"#,
            "../tool",
            DEFAULT_PATH,
            "/srv/app",
            vec!["/srv/tool"],
        ),
    ];
    for (config, program, search_path, working_dir, candidates) in cases {
        let command = ImageCommand::of_config(config.as_bytes()).unwrap();
        assert_eq!(command.program, program, "{config}");
        assert_eq!(command.search_path, search_path, "{config}");
        assert_eq!(command.working_dir, working_dir, "{config}");
        assert_eq!(command.candidates(), candidates, "{config}");
    }
    for config in [
        r#"{"config": {}}"#,
        r#"{"architecture": "amd64"}"#,
        r#"{"config": {"Entrypoint": [""]}}"#,
    ] {
        assert_eq!(
            ImageCommand::of_config(config.as_bytes()).unwrap_err(),
            LookupError::NoCommand,
            "{config}"
        );
    }
    assert!(matches!(
        ImageCommand::of_config(b"not json"),
        Err(LookupError::Config(_))
    ));
}

#[test]
fn paths_are_joined_and_folded_like_the_kernel_does() {
    for (dir, path, joined) in [
        ("/", "usr/bin/sh", "/usr/bin/sh"),
        ("/usr/bin", "../lib/ld.so", "/usr/lib/ld.so"),
        ("/a", "/abs//./b/", "/abs/b"),
        ("/", "../../..", "/"),
        ("", "x", "/x"),
    ] {
        assert_eq!(join(dir, path), joined, "{dir} + {path}");
    }
}

#[test]
fn links_of_every_layer_resolve_as_the_runtime_stacks_them() {
    let base = layer(&[
        E::Dir("usr/bin/"),
        E::Link("bin", "usr/bin"),
        E::Link("lib64", "usr/lib64"),
        E::Link("usr/lib64/ld-linux-x86-64.so.2", "../lib/x86_64/ld.so"),
        E::Link("usr/bin/sh", "busybox"),
        E::Link("usr/bin/old", "/usr/bin/busybox"),
        E::Link("etc/alternatives/java", "/usr/lib/jvm/bin/java"),
        E::Link("usr/bin/java", "/etc/alternatives/java"),
        E::Link("loop/a", "b"),
        E::Link("loop/b", "a"),
    ]);
    let links = merged(std::slice::from_ref(&base), None);
    for (path, resolved) in [
        ("/bin/sh", "/usr/bin/busybox"),
        ("bin/old", "/usr/bin/busybox"),
        ("/lib64/ld-linux-x86-64.so.2", "/usr/lib/x86_64/ld.so"),
        ("/bin/java", "/usr/lib/jvm/bin/java"),
        ("/bin/../etc/hosts", "/usr/etc/hosts"),
        ("/app/server", "/app/server"),
    ] {
        assert_eq!(links.resolve(path).unwrap(), resolved, "{path}");
    }
    assert_eq!(
        links.resolve("/loop/a").unwrap_err(),
        LookupError::LinkLoop("/loop/a".into())
    );

    // Upper layers: a whiteout removes a link, an opaque directory hides the links
    // below it, a directory replaces a link, a file replaces a directory of links.
    let upper = layer(&[
        E::File("usr/bin/.wh.sh", b""),
        E::File("etc/alternatives/.wh..wh..opq", b""),
        E::Link("etc/alternatives/kept", "/x"),
        E::Dir("lib64/"),
        E::File("loop", b"now a file"),
    ]);
    let links = merged(&[base, upper], None);
    for (path, resolved) in [
        ("/bin/sh", "/usr/bin/sh"),
        ("/bin/java", "/etc/alternatives/java"),
        ("/etc/alternatives/kept", "/x"),
        ("/lib64/ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2"),
        ("/loop/a", "/loop/a"),
        // Untouched by the upper layer.
        ("/bin/old", "/usr/bin/busybox"),
    ] {
        assert_eq!(links.resolve(path).unwrap(), resolved, "{path}");
    }
}

#[test]
fn a_bare_command_is_found_in_its_path_through_links() {
    let base = layer(&[
        E::Link("bin", "usr/bin"),
        E::File("usr/bin/python3.12", b"\x7fELF"),
        E::Link("usr/bin/python3", "python3.12"),
        E::File("usr/bin/busybox", b"\x7fELF"),
        E::Link("usr/bin/ls", "busybox"),
        E::File("usr/sbin/nginx", b"\x7fELF"),
        E::File("opt/other/nginx", b"\x7fELF"),
    ]);
    let command = |program: &str, path: &str| ImageCommand {
        program: program.into(),
        search_path: path.into(),
        working_dir: "/".into(),
    };
    for (program, search, found) in [
        ("python3", "/bin:/usr/local/bin", "/usr/bin/python3.12"),
        ("ls", "/usr/local/bin:/bin", "/usr/bin/busybox"),
        ("nginx", DEFAULT_PATH, "/usr/sbin/nginx"),
        ("nginx", "/opt/other:/usr/sbin", "/opt/other/nginx"),
        ("/bin/ls", DEFAULT_PATH, "/usr/bin/busybox"),
    ] {
        let command = command(program, search);
        let links = merged(std::slice::from_ref(&base), command.bare_name());
        assert_eq!(
            links.find(&command).unwrap(),
            found,
            "{program} in {search}"
        );
    }
    let missing = command("node", DEFAULT_PATH);
    let links = merged(std::slice::from_ref(&base), missing.bare_name());
    assert_eq!(
        links.find(&missing).unwrap_err(),
        LookupError::NotFound("node".into())
    );
    // A whiteout in an upper layer removes the command.
    let upper = layer(&[E::File("usr/sbin/.wh.nginx", b"")]);
    let nginx = command("nginx", "/usr/sbin");
    let links = merged(&[base, upper], nginx.bare_name());
    assert!(matches!(links.find(&nginx), Err(LookupError::NotFound(_))));
}

#[test]
fn a_layer_says_whether_it_holds_the_file_and_only_its_head_is_kept() {
    let big = vec![7u8; 64 * 1024];
    let tar = layer(&[
        E::File("etc/.wh..wh..opq", b""),
        E::File("app/server", &big),
        E::Hard("app/copy", "app/server"),
        E::Dir("app/dir/"),
        E::File("usr/.wh.lib", b""),
        // A whiteout hides the layers below: the same layer's file is there.
        E::File("srv/.wh.tool", b""),
        E::File("srv/tool", b"new"),
    ]);
    // (path, answer)
    let cases = [
        ("/app/server", InLayer::Head(vec![7u8; 100])),
        ("/app/copy", InLayer::HardLink("/app/server".into())),
        ("/app/dir", InLayer::Gone),
        ("/usr/lib/ld.so", InLayer::Gone),
        ("/usr/lib", InLayer::Gone),
        ("/etc/passwd", InLayer::Opaque),
        ("/srv/run", InLayer::Absent),
        ("/srv/tool", InLayer::Head(b"new".to_vec())),
        // Only inside: `/usr/library` is not under the whited-out `/usr/lib`.
        ("/usr/library", InLayer::Absent),
    ];
    for (path, answer) in cases {
        assert_eq!(
            read_in_layer(tar.as_slice(), path, 100).unwrap(),
            answer,
            "{path}"
        );
    }
    // A block that is no tar header (its checksum does not match).
    assert!(matches!(
        read_in_layer(&[b'x'; 1024][..], "/x", 1),
        Err(LookupError::Tar(_))
    ));
}

#[test]
fn links_beyond_the_bounds_are_refused_not_kept() {
    let many: Vec<(String, String)> = (0..100)
        .map(|i| (format!("l/{i}"), format!("/target/{i}")))
        .collect();
    let entries: Vec<E<'_>> = many.iter().map(|(p, t)| E::Link(p, t)).collect();
    let tar = layer(&entries);
    let limits = LookupLimits {
        entries: 50,
        path_bytes: 1 << 20,
    };
    assert_eq!(
        MergedLinks::new(limits, None)
            .add_layer(tar.as_slice())
            .unwrap_err(),
        LookupError::TooManyLinks {
            entries: 50,
            bytes: 1 << 20
        }
    );
    let limits = LookupLimits {
        entries: 1000,
        path_bytes: 512,
    };
    assert!(matches!(
        MergedLinks::new(limits, None).add_layer(tar.as_slice()),
        Err(LookupError::TooManyLinks { .. })
    ));
    // Within the bounds, a layer that whites them out frees their room again.
    let limits = LookupLimits {
        entries: 100,
        path_bytes: 1 << 20,
    };
    let mut links = MergedLinks::new(limits, None);
    links.add_layer(tar.as_slice()).unwrap();
    links
        .add_layer(layer(&[E::File(".wh.l", b"")]).as_slice())
        .unwrap();
    assert_eq!(links.path_bytes, 0);
    links.add_layer(tar.as_slice()).unwrap();
}
