//! The admission policy that holds the exec-format-error daemon to its own node's level
//! label, on the real kube-apiserver 1.36.2 of the kit (only the real server evaluates
//! ValidatingAdmissionPolicies): the daemon's ServiceAccount, impersonated with and
//! without the node its token would be bound to, tries every write RBAC lets it make.
//! Without the kit it says SKIPPED.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::Path;

use multiarch_test_support::kit::{self, ApiServer};

/// The kit's SLOT for this test: apart from the e2e tier's (3), a developer's default (0)
/// and the bench's (7).
const SLOT: &str = "6";
const DAEMON: &str = "system:serviceaccount:multiarch:multiarch-enoexec-daemon";
const LABEL: &str = "multiarch.openshift.io/arch-variant";

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The admin's kubeconfig, impersonating the daemon's account with `extra` (what the API
/// server sets from a pod's bound token).
fn as_the_daemon(
    server: &ApiServer,
    dir: &Path,
    file: &str,
    node: Option<&str>,
) -> std::path::PathBuf {
    let text = std::fs::read_to_string(server.kubeconfig()).unwrap();
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let user = &mut config["users"][0]["user"];
    user["as"] = DAEMON.into();
    if let Some(node) = node {
        let mut extra = serde_yaml_ng::Mapping::new();
        extra.insert(
            "authentication.kubernetes.io/node-name".into(),
            vec![serde_yaml_ng::Value::from(node)].into(),
        );
        user["as-user-extra"] = extra.into();
    }
    let path = dir.join(file);
    std::fs::write(&path, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    path
}

/// Waits until the API server enforces the policy (it reads new policies within a
/// second or so): the first refusal of the unbound account says so.
fn wait_until_enforced(server: &ApiServer, unbound: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let out = server.kubectl_with(unbound, &["label", "node", "own", &format!("{LABEL}=v3")]);
        if String::from_utf8_lossy(&out.stderr).contains(ONLY_OWN) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the policy never refused the unbound account: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Written before the policy was read: undone, and tried again.
        ok(&server.kubectl(&["label", "node", "own", &format!("{LABEL}-")]));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

const ONLY_OWN: &str = "multiarch-enoexec-daemon may label only the node it runs on";
const ONLY_LABEL: &str = "multiarch-enoexec-daemon may change only the label multiarch.openshift.io/arch-variant of its node";
const ONLY_LEVELS: &str =
    "may set multiarch.openshift.io/arch-variant only to an x86-64 level (v1 to v4)";

/// The API server with the policy, the daemon's roles and two nodes.
fn set_up(kit: &Path, bin: &Path, dir: &Path) -> ApiServer {
    let server = ApiServer::up(kit, bin, &dir.join("cluster"), SLOT);
    let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests");
    ok(&server.kubectl(&["create", "namespace", "multiarch"]));
    for file in ["operator/admission.yaml", "enoexec/rbac.yaml"] {
        let path = manifests.join(file);
        ok(&server.kubectl(&["apply", "-f", path.to_str().unwrap()]));
    }
    let nodes = dir.join("nodes.yaml");
    std::fs::write(
        &nodes,
        "apiVersion: v1\nkind: Node\nmetadata: {name: own, labels: {kubernetes.io/arch: amd64}}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {name: other, labels: {kubernetes.io/arch: amd64}}\n",
    )
    .unwrap();
    ok(&server.kubectl(&["apply", "-f", nodes.to_str().unwrap()]));
    server
}

#[test]
fn the_daemon_may_set_only_its_own_nodes_level() {
    let (kit, bin) = match kit::find() {
        Ok(found) => found,
        Err(why) => {
            println!("SKIPPED: the daemon's node policy on kube-apiserver: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let server = set_up(&kit, &bin, dir.path());
    let bound = as_the_daemon(&server, dir.path(), "bound.kubeconfig", Some("own"));
    let unbound = as_the_daemon(&server, dir.path(), "unbound.kubeconfig", None);
    wait_until_enforced(&server, &unbound);

    // The daemon's own write: a merge patch of the one label, as node_level.rs sends it.
    let patch = format!(r#"{{"metadata":{{"labels":{{"{LABEL}":"v3"}}}}}}"#);
    ok(&server.kubectl_with(
        &bound,
        &["patch", "node", "own", "--type", "merge", "-p", &patch],
    ));
    let labels = ok(&server.kubectl(&["get", "node", "own", "-o", "jsonpath={.metadata.labels}"]));
    assert!(
        labels.contains(r#""multiarch.openshift.io/arch-variant":"v3""#),
        "{labels}"
    );

    let (v3, v4, v9) = (
        format!("{LABEL}=v3"),
        format!("{LABEL}=v4"),
        format!("{LABEL}=v9"),
    );
    let unschedulable = r#"{"spec":{"unschedulable":true}}"#;
    let cases: Vec<(&str, &Path, Vec<&str>, &str)> = vec![
        (
            "another node",
            &bound,
            vec!["label", "node", "other", &v3],
            ONLY_OWN,
        ),
        (
            "without a bound token",
            &unbound,
            vec!["label", "node", "own", &v4, "--overwrite"],
            ONLY_OWN,
        ),
        (
            "another label",
            &bound,
            vec!["label", "node", "own", "team=mine"],
            ONLY_LABEL,
        ),
        (
            "the architecture label removed",
            &bound,
            vec!["label", "node", "own", "kubernetes.io/arch-"],
            ONLY_LABEL,
        ),
        // A patch, not `kubectl cordon`, which exits 0 on a refusal.
        (
            "cordoned",
            &bound,
            vec!["patch", "node", "own", "-p", unschedulable],
            ONLY_LABEL,
        ),
        (
            "annotated",
            &bound,
            vec!["annotate", "node", "own", "a=b"],
            ONLY_LABEL,
        ),
        (
            "not a level",
            &bound,
            vec!["label", "node", "own", &v9, "--overwrite"],
            ONLY_LEVELS,
        ),
    ];
    for (name, kubeconfig, args, refusal) in cases {
        let out = server.kubectl_with(kubeconfig, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(refusal),
            "{name}: {stderr}"
        );
    }
    // Nothing of it landed; an admin is not held by the policy.
    let own = ok(&server.kubectl(&["get", "node", "own", "-o", "json"]));
    let own: serde_json::Value = serde_json::from_str(&own).unwrap();
    assert_eq!(own["metadata"]["labels"][LABEL], "v3");
    assert_eq!(own["metadata"]["labels"]["kubernetes.io/arch"], "amd64");
    assert!(own["spec"]["unschedulable"].is_null());
    ok(&server.kubectl(&["label", "node", "other", "team=admin"]));
}
