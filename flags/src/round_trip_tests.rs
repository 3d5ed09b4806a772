//! Every role's flags survive the trip through the argv the operator writes, and a role
//! at its defaults is written as its bare subcommand.

use std::fmt::Debug;

use clap::{Args, Command};

use super::*;
use crate::argv::command_without_env;

const CLIENT: [&str; 1] = ["--kubeconfig=/etc/kube/config"];
const LEASE: [&str; 4] = [
    "--leader-elect=false",
    "--lease-duration=30s",
    "--renew-deadline=20s",
    "--retry-period=3s",
];
const OPS: [&str; 1] = ["--metrics-addr=127.0.0.1:9000"];
const LOG: [&str; 2] = ["--log-format=json", "--log-level=multiarch=debug,info"];
const INSPECTOR_SERVICE: [&str; 2] = [
    "--inspector-endpoint=https://inspector.example:443",
    "--inspector-tls-dir=/etc/inspector-client",
];

fn argv(subcommand: &str, groups: &[&[&str]]) -> Vec<String> {
    std::iter::once(subcommand)
        .chain(groups.iter().flat_map(|g| g.iter().copied()))
        .map(str::to_owned)
        .collect()
}

/// Each of `argvs` (every flag away from its default) parses, is written back, and parses
/// again to the same flags; together they set every flag the role has.
fn round_trips<T: RoleFlags + PartialEq + Debug>(argvs: &[Vec<String>]) {
    let mut written_flags = Vec::new();
    for argv in argvs {
        let parsed: T = parse_argv(argv).unwrap();
        let written = to_argv(&parsed, &[]).unwrap();
        assert_eq!(written[0], T::SUBCOMMAND);
        assert_eq!(
            written.len(),
            argv.len(),
            "a non-default flag was not written: {written:?} from {argv:?}"
        );
        assert_eq!(parse_argv::<T>(&written).unwrap(), parsed, "{written:?}");
        written_flags.extend(written);
    }
    let command = T::augment_args(Command::new(T::SUBCOMMAND));
    for long in command.get_arguments().filter_map(clap::Arg::get_long) {
        assert!(
            written_flags
                .iter()
                .any(|f| *f == format!("--{long}") || f.starts_with(&format!("--{long}="))),
            "{}: the test sets no --{long}",
            T::SUBCOMMAND
        );
    }
}

#[test]
fn the_scheduler_round_trips() {
    let own = [
        "--scheduler-name=arch-aware",
        "--namespace=ops",
        "--lease-name=arch-aware-lease",
        "--identity=replica-1",
        "--bind-concurrency=4",
        "--kube-api-qps=12.5",
        "--kube-api-burst=7",
        "--volume-bind-timeout=1m 30s",
        "--metrics-addr=127.0.0.1:1",
    ];
    round_trips::<SchedulerArgs>(&[
        argv(
            "scheduler",
            &[&CLIENT, &LEASE, &own, &INSPECTOR_SERVICE, &LOG],
        ),
        argv(
            "scheduler",
            &[&["--image-platforms=/tmp/images.yaml"], &LOG],
        ),
        argv(
            "scheduler",
            &[&["--registries-config=/etc/registries.yaml"]],
        ),
    ]);
}

#[test]
fn the_webhook_round_trips() {
    let own = [
        "--listen=127.0.0.1:8443",
        "--cert=/tls/crt",
        "--key=/tls/key",
        "--scheduler-name=arch-aware",
        "--namespace=ops",
        "--mode=SchedulingGate",
        "--no-kubernetes",
        "--client-ca=/ca/ca.crt",
        "--callers-limited-to-api-server",
        "--shutdown-delay=1s",
        "--admission-lookup-deadline=50ms",
        "--admission-lookups-in-flight=8",
    ];
    round_trips::<WebhookArgs>(&[argv("webhook", &[&CLIENT, &own, &INSPECTOR_SERVICE, &LOG])]);
}

#[test]
fn the_inspector_round_trips() {
    let own = [
        "--listen=127.0.0.1:7443",
        "--registries-config=/etc/registries.yaml",
        "--registries-config-optional",
        "--registries-config-check=1m",
        "--no-kubernetes",
        "--read-binaries",
        "--cache-size=10",
        "--cache-max-mib=1",
        "--tag-ttl=1h",
        "--negative-ttl=1s",
        "--connect-timeout=2s",
        "--timeout=3s",
        "--tls-dir=/tls",
    ];
    round_trips::<InspectorArgs>(&[argv("inspector", &[&CLIENT, &own, &OPS, &LOG])]);
}

#[test]
fn the_gate_controller_round_trips() {
    let own = ["--namespace=ops", "--concurrency=3"];
    round_trips::<GateControllerArgs>(&[argv(
        "gate-controller",
        &[&CLIENT, &LEASE, &INSPECTOR_SERVICE, &own, &OPS, &LOG],
    )]);
}

#[test]
fn the_enoexec_daemon_round_trips() {
    let own = [
        "--node-name=node-a",
        "--namespace=ops",
        "--runtime-endpoint=unix:///run/crio/crio.sock",
        "--proc-root=/host/proc",
        "--cgroup-root=/host/cgroup",
        "--rate=0.5",
        "--burst=1",
        "--dedup-window=10s",
        "--queue-capacity=2",
        "--no-node-level-label",
    ];
    round_trips::<EnoexecDaemonArgs>(&[argv("enoexec-daemon", &[&CLIENT, &own, &OPS, &LOG])]);
}

#[test]
fn the_enoexec_handler_round_trips() {
    let own = [
        "--namespace=ops",
        "--misplaced-scan-interval=1h",
        "--misplaced-scan-max-pods=5",
    ];
    round_trips::<EnoexecHandlerArgs>(&[argv(
        "enoexec-handler",
        &[&CLIENT, &LEASE, &own, &INSPECTOR_SERVICE, &OPS, &LOG],
    )]);
}

#[test]
fn the_operator_round_trips() {
    let own = [
        "--namespace=ops",
        "--listen=127.0.0.1:6443",
        "--operand-image=registry.example/multiarch:1",
        "--operand-image-pull-policy=Always",
        "--operand-image-pull-secrets=a,b",
        "--operand-replicas=3",
        "--operand-cpu-request=1",
        "--operand-memory-request=1Gi",
        "--operand-memory-limit=2Gi",
        "--operand-node-selector=zone=a,disk=ssd",
        r#"--operand-tolerations=[{"operator":"Exists"}]"#,
        "--api-server-cidrs=10.0.0.0/8,192.168.0.0/16",
        "--api-server-client-ca-config-map=api-ca",
        "--enoexec-daemon-sys-resource",
        "--enoexec-daemon-runtime-socket=/run/k3s/containerd/containerd.sock",
        "--enoexec-daemon-pod-logs-dir=/data/kubelet/pod-logs",
        "--drain-timeout=1m",
        "--route-settle=1s",
        "--certificate-check=1h",
    ];
    round_trips::<OperatorArgs>(&[argv("operator", &[&CLIENT, &LEASE, &own, &OPS, &LOG])]);
}

fn written_defaults<T: RoleFlags>() -> Vec<String> {
    to_argv(&defaults::<T>().unwrap(), &[]).unwrap()
}

#[test]
fn a_role_at_its_defaults_is_its_bare_subcommand() {
    assert_eq!(written_defaults::<SchedulerArgs>(), ["scheduler"]);
    assert_eq!(written_defaults::<WebhookArgs>(), ["webhook"]);
    assert_eq!(written_defaults::<InspectorArgs>(), ["inspector"]);
    assert_eq!(
        written_defaults::<GateControllerArgs>(),
        ["gate-controller"]
    );
    assert_eq!(
        written_defaults::<EnoexecHandlerArgs>(),
        ["enoexec-handler"]
    );
    assert_eq!(written_defaults::<OperatorArgs>(), ["operator"]);
    // The node's name has no default: the DaemonSet gives it.
    let daemon: EnoexecDaemonArgs =
        parse_argv(&["enoexec-daemon", "--node-name=$(NODE_NAME)"]).unwrap();
    assert_eq!(
        to_argv(&daemon, &[]).unwrap(),
        ["enoexec-daemon", "--node-name=$(NODE_NAME)"]
    );
}

#[test]
fn the_environment_is_not_read_for_a_pods_argv() {
    // The operator's own POD_NAMESPACE (or a test runner's KUBECONFIG) is not the
    // written pod's: the defaults are the declared ones whatever the environment says.
    // Checked through the definition, as a test must not change its process's environment.
    let command = command_without_env::<SchedulerArgs>();
    assert!(command.get_arguments().all(|a| a.get_env().is_none()));
    let declared = SchedulerArgs::augment_args(Command::new("scheduler"));
    assert!(declared.get_arguments().any(|a| a.get_env().is_some()));
}

#[test]
fn argv_of_another_role_or_an_unknown_flag_is_refused_and_read_leniently() {
    assert!(matches!(
        parse_argv::<SchedulerArgs>(&["webhook"]),
        Err(FlagsError::OtherRole { .. })
    ));
    let old = [
        "scheduler",
        "--scheduler-name=b",
        "--removed-flag=1",
        "--gone",
    ];
    assert!(matches!(
        parse_argv::<SchedulerArgs>(&old),
        Err(FlagsError::Parse { .. })
    ));
    let read: SchedulerArgs = parse_known_argv(&old).unwrap();
    assert_eq!(read.scheduler_name, "b");
}

#[test]
fn a_list_item_holding_its_delimiter_is_refused() {
    let mut operator: OperatorArgs = defaults().unwrap();
    operator.api_server_cidrs = vec!["10.0.0.0/8,evil".into()];
    assert!(matches!(
        to_argv(&operator, &[]),
        Err(FlagsError::DelimiterInValue { delimiter: ',', .. })
    ));
}

#[test]
fn a_pinned_flag_is_written_at_its_default_and_must_be_a_flag() {
    let scheduler: SchedulerArgs = defaults().unwrap();
    assert_eq!(
        to_argv(&scheduler, &["scheduler_name", "metrics_addr"]).unwrap(),
        [
            "scheduler",
            "--scheduler-name=multiarch-scheduler",
            "--metrics-addr=0.0.0.0:10259"
        ]
    );
    assert!(matches!(
        to_argv(&scheduler, &["scheduler-name"]),
        Err(FlagsError::NoSuchFlag { field, .. }) if field == "scheduler-name"
    ));
}
