//! Every role's folder under `manifests/` is what `multiarch manifests` generates, and its RBAC grants
//! exactly what the scheduler calls.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;

use multiarch_operator::install as manifests;

#[test]
fn checked_in_manifests_match_the_code() {
    let folders = manifests::folders().unwrap();
    assert!(folders.len() >= 5);
    for (name, files) in &folders {
        in_sync(name, files);
    }
    // The root: `kubectl apply -k manifests/` installs the CRDs and the operator.
    for (file, documents) in manifests::root() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../manifests")
            .join(file);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            manifests::to_yaml(&documents).unwrap(),
            "{} drifted",
            path.display()
        );
    }
}

#[test]
fn the_webhook_fails_open_and_never_sees_system_namespaces() {
    let all = folder("webhook");
    let mwc = &all
        .iter()
        .find(|(f, _)| *f == "mutatingwebhookconfiguration.yaml")
        .unwrap()
        .1[0];
    let hook = &mwc["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Ignore");
    assert_eq!(hook["timeoutSeconds"], 5);
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["reinvocationPolicy"], "Never");
    assert_eq!(hook["clientConfig"]["service"]["path"], "/mutate-pods");
    let excluded = hook["namespaceSelector"]["matchExpressions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == "kubernetes.io/metadata.name")
        .unwrap()["values"]
        .as_array()
        .unwrap();
    assert!(
        excluded.iter().any(|v| v == "kube-system") && excluded.iter().any(|v| v == "multiarch")
    );
    assert_eq!(
        hook["objectSelector"]["matchExpressions"][0]["key"],
        "multiarch.openshift.io/scheduler"
    );
}

fn folder(name: &str) -> manifests::Files {
    manifests::folders()
        .unwrap()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap()
        .1
}

fn in_sync(name: &str, generated: &[(&str, Vec<serde_json::Value>)]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests")
        .join(name);
    for (file, documents) in generated {
        let path = dir.join(file);
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} is missing ({e})", path.display()));
        assert!(
            on_disk == manifests::to_yaml(documents).unwrap(),
            "{} differs from the generated one; regenerate with: cargo run -q --bin multiarch -- manifests --dir manifests",
            path.display()
        );
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = generated.iter().map(|(f, _)| (*f).to_owned()).collect();
    expected.sort();
    assert_eq!(names, expected, "stale files in {}", dir.display());
}

#[test]
fn the_scheduler_role_is_least_privilege() {
    let all = folder("scheduler");
    let rbac = &all.iter().find(|(f, _)| *f == "rbac.yaml").unwrap().1;
    let role = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "multiarch-scheduler")
        .unwrap();
    let grants: Vec<(String, String)> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let resources: Vec<String> = r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            let verbs: Vec<String> = r["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect();
            resources
                .into_iter()
                .flat_map(move |res| verbs.clone().into_iter().map(move |v| (res.clone(), v)))
        })
        .collect();
    for needed in [
        ("pods", "watch"),
        ("pods/binding", "create"),
        ("pods/status", "patch"),
        ("nodes", "list"),
        ("events", "create"),
        ("events", "patch"),
        ("clusterpodplacementconfigs", "watch"),
        // Preemption, volume binding, PDBs and namespace selectors.
        ("pods", "delete"),
        ("persistentvolumeclaims", "patch"),
        ("persistentvolumes", "patch"),
        ("poddisruptionbudgets", "watch"),
        ("namespaces", "watch"),
    ] {
        assert!(
            grants.contains(&(needed.0.to_owned(), needed.1.to_owned())),
            "missing {needed:?}"
        );
    }
    assert!(
        !grants.iter().any(|(r, _)| r == "secrets"),
        "the scheduler must not read secrets"
    );
    // Preemption deletes victims (as kube-scheduler does); nothing else is deleted, and
    // nothing is ever replaced wholesale.
    assert!(
        !grants
            .iter()
            .any(|(r, v)| v == "*" || v == "update" || (v == "delete" && r != "pods")),
        "{grants:?}"
    );

    let lease_role = rbac.iter().find(|d| d["kind"] == "Role").unwrap();
    assert_eq!(lease_role["metadata"]["namespace"], "multiarch");
    assert_eq!(
        lease_role["rules"][1]["resourceNames"][0], "multiarch-scheduler",
        "never kube-scheduler's lease"
    );
}

#[test]
fn the_deployment_runs_two_replicas_with_probes() {
    let all = folder("scheduler");
    let deployment = &all.iter().find(|(f, _)| *f == "scheduler.yaml").unwrap().1[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert!(container["resources"]["requests"]["cpu"].is_string());
    assert_eq!(
        deployment["spec"]["template"]["spec"]["schedulerName"],
        "default-scheduler"
    );
}

#[test]
fn the_enoexec_daemon_has_capabilities_not_privileges() {
    let all = folder("enoexec");
    let ds = &all.iter().find(|(f, _)| *f == "daemon.yaml").unwrap().1[0];
    assert_eq!(ds["kind"], "DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostPID"], true,
        "reads /proc/PID/cgroup of container processes"
    );
    assert_eq!(
        pod["tolerations"][0]["operator"], "Exists",
        "runs on tainted nodes too"
    );
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["privileged"], false);
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    // SYS_RESOURCE only when asked (kernels before 5.11): see enoexec.rs's tests.
    assert_eq!(
        security["capabilities"]["add"],
        serde_json::json!(["BPF", "PERFMON"])
    );
    assert_eq!(
        container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["readOnly"], true, "{m}");
            m["mountPath"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        mounts,
        [
            "/sys/kernel/tracing",
            "/host/run",
            "/host/sys/fs/cgroup",
            "/var/log/pods"
        ]
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&"--cgroup-root=/host/sys/fs/cgroup"),
        "{args:?}"
    );
}

/// A component slow under load is not restarted: every container's liveness probe waits
/// 5 s for an answer and restarts only after a minute of failures in a row, and its
/// readiness probe waits 5 s too (the default, 1 s, restarted the webhook under a
/// tenant's flood on a 2-core node).
#[test]
fn every_probe_tolerates_a_slow_answer() {
    let mut containers = 0;
    for (folder, files) in manifests::folders().unwrap() {
        for (file, documents) in files {
            for document in documents {
                let pod = &document["spec"]["template"]["spec"];
                for container in pod["containers"].as_array().into_iter().flatten() {
                    let at = format!("{folder}/{file}: {}", container["name"]);
                    let liveness = &container["livenessProbe"];
                    let readiness = &container["readinessProbe"];
                    assert!(liveness.is_object(), "{at} has no liveness probe");
                    assert!(readiness.is_object(), "{at} has no readiness probe");
                    assert_eq!(liveness["timeoutSeconds"], 5, "{at}");
                    assert_eq!(readiness["timeoutSeconds"], 5, "{at}");
                    let failing_for = liveness["failureThreshold"].as_u64().unwrap()
                        * liveness["periodSeconds"].as_u64().unwrap();
                    assert!(failing_for >= 60, "{at}: restarted after {failing_for} s");
                    containers += 1;
                }
            }
        }
    }
    // operator, scheduler, inspector, webhook, gate controller, eBPF daemon and handler.
    assert!(containers >= 7, "only {containers} containers");
}
