//! Every workload multiarch ships names its role's flags as this binary parses them: the
//! checked-in manifests (the operator's own Deployment included), and every object the
//! operator generates with every setting and component on. A flag renamed here and not
//! there, or written by the operator with a typo, fails this test instead of a pod on a
//! cluster.

use std::path::Path;

use clap::{CommandFactory, Parser};
use multiarch_operator::{
    apply::Owner,
    certificates::SecretData,
    desired::{self, Wanted},
    install::Settings,
    observe::reads::OptionalApis,
    target::Target,
};
use serde::Deserialize;
use serde_json::Value;

use super::Cli;

/// `args` with the flags the container's environment gives (the kubelet sets them, from
/// a value or the downward API): clap reads those from the process environment, which a
/// test must not change.
fn with_env(args: Vec<String>, container: &Value) -> Vec<String> {
    let env: Vec<(String, String)> = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let value = e["value"].as_str().unwrap_or("from-the-downward-api");
            Some((e["name"].as_str()?.to_owned(), value.to_owned()))
        })
        .collect();
    let cli = Cli::command();
    let Some(role) = args.first().and_then(|r| cli.find_subcommand(r)) else {
        return args;
    };
    let mut extra = Vec::new();
    for arg in role.get_arguments() {
        let (Some(var), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let Some((_, value)) = env.iter().find(|(name, _)| var == name.as_str()) else {
            continue;
        };
        let flag = format!("--{long}");
        if !args
            .iter()
            .any(|a| *a == flag || a.starts_with(&format!("{flag}=")))
        {
            extra.push(format!("{flag}={value}"));
        }
    }
    args.into_iter().chain(extra).collect()
}

/// `(where, args)` of every container of a Deployment or DaemonSet in `object`.
fn workload_args(object: &Value, origin: &str) -> Vec<(String, Vec<String>)> {
    let kind = object["kind"].as_str().unwrap_or_default();
    if !matches!(kind, "Deployment" | "DaemonSet") {
        return Vec::new();
    }
    let spec = &object["spec"]["template"]["spec"];
    ["initContainers", "containers"]
        .iter()
        .flat_map(|field| spec[*field].as_array().cloned().unwrap_or_default())
        .filter_map(|container| {
            let args: Vec<String> = container["args"]
                .as_array()?
                .iter()
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect();
            let args = with_env(args, &container);
            Some((
                format!(
                    "{origin}: {kind} {} container {}",
                    object["metadata"]["name"].as_str().unwrap_or_default(),
                    container["name"].as_str().unwrap_or_default()
                ),
                args,
            ))
        })
        .collect()
}

fn assert_parses(found: &[(String, Vec<String>)]) {
    assert!(!found.is_empty());
    for (place, args) in found {
        let argv = std::iter::once("multiarch".to_owned()).chain(args.iter().cloned());
        if let Err(e) = Cli::try_parse_from(argv) {
            panic!("{place}: {args:?} does not parse: {e}");
        }
    }
}

fn manifests(dir: &Path, found: &mut Vec<(String, Vec<String>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("the manifests directory")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            manifests(&path, found);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).expect("a manifest");
            for document in serde_yaml_ng::Deserializer::from_str(&text) {
                let object = Value::deserialize(document).expect("YAML");
                found.extend(workload_args(&object, &path.display().to_string()));
            }
        }
    }
}

#[test]
fn every_checked_in_workload_parses_with_this_binary() {
    let mut found = Vec::new();
    manifests(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests"),
        &mut found,
    );
    // The operator and each role it installs without it.
    for role in [
        "operator ",
        "scheduler ",
        "webhook ",
        "inspector ",
        "gate-controller ",
    ] {
        assert!(
            found
                .iter()
                .any(|(_, args)| args.join(" ").starts_with(role)),
            "no {role}in manifests/"
        );
    }
    assert_parses(&found);
}

#[test]
fn every_workload_the_operator_writes_parses_with_this_binary() {
    let settings = Settings {
        api_server_cidrs: vec!["10.0.0.0/8".into()],
        api_server_client_ca_config_map: Some("api-server-client-ca".into()),
        enoexec_daemon_sys_resource: true,
        enoexec_daemon_runtime_socket: Some("/run/k3s/containerd/containerd.sock".into()),
        enoexec_daemon_pod_logs_dir: "/data/kubelet/pod-logs".into(),
        ..Settings::default()
    };
    let target = Target {
        scheduler: true,
        enoexec_daemon: true,
        enoexec_handler: true,
        routing: Some(multiarch_crd::PlacementMode::Scheduler),
        draining_scheduler: false,
        draining_enoexec: false,
    };
    let spec: multiarch_crd::ClusterPodPlacementConfigSpec = serde_json::from_value(
        serde_json::json!({"logVerbosity": "TraceAll", "placement": {"schedulerName": "arch-aware"}}),
    )
    .expect("a spec");
    let objects = desired::objects(&Wanted {
        settings: &settings,
        spec: &spec,
        target: &target,
        owner: &Owner { uid: "u".into() },
        ca_bundle: "Q0E=",
        webhook_tls: &SecretData::new(),
        inspector_tls: &SecretData::new(),
        inspector_client_tls: &SecretData::new(),
        apis: OptionalApis {
            service_monitors: true,
            prometheus_rules: true,
        },
        previous_scheduler_names: &["multiarch-scheduler".into()],
    })
    .unwrap();
    let found: Vec<_> = objects
        .iter()
        .flat_map(|o| workload_args(o, "operator"))
        .collect();
    for role in [
        "scheduler ",
        "webhook ",
        "inspector ",
        "gate-controller ",
        "enoexec-daemon ",
        "enoexec-handler ",
    ] {
        assert!(
            found
                .iter()
                .any(|(_, args)| args.join(" ").starts_with(role)),
            "the operator wrote no {role}"
        );
    }
    assert_parses(&found);
}
