//! Creating the ClusterPodPlacementConfig installs every operand, routes pods only once
//! the scheduler is available, says what it sees in the status, and reconciling an
//! unchanged configuration writes nothing.

#![allow(clippy::unwrap_used)]

mod common;
use multiarch_test_support::rbac;

use std::{sync::Arc, time::Duration};

use base64::Engine;
use common::*;
use multiarch_fake_apiserver::FakeApiServer;
use multiarch_operator::install;
use serde_json::{Value, json};

const DRAIN: Duration = Duration::from_secs(600);

fn uid(server: &multiarch_fake_apiserver::FakeApiServer) -> Value {
    get(
        server,
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "cluster",
    )
    .unwrap()["metadata"]["uid"]
        .clone()
}

/// A printer column's value as `kubectl get` shows it, for the JSONPath forms the CRD uses.
fn column(object: &Value, path: &str) -> String {
    let path = path.trim_start_matches('.');
    if let Some(rest) = path.strip_prefix("status.conditions[?(@.type==\"") {
        let (type_, field) = rest.split_once("\")].").unwrap();
        return object["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .map(|c| c[field].as_str().unwrap_or("").to_owned())
            .unwrap_or_default();
    }
    let value = path.split('.').fold(object, |v, k| &v[k]);
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The operator's own webhooks (validating, CRD conversion) carry the CA bundle `ca`
/// holds, a PEM certificate.
async fn operator_webhooks_trust(server: &FakeApiServer, ca: &Value) {
    eventually("the CA bundle in the operator's webhooks", || {
        let vwc = server
            .get(
                "admissionregistration.k8s.io/validatingwebhookconfigurations",
                "",
                "multiarch-operator",
            )
            .unwrap();
        let crd = server
            .get(
                "apiextensions.k8s.io/customresourcedefinitions",
                "",
                "clusterpodplacementconfigs.multiarch.openshift.io",
            )
            .unwrap();
        vwc["webhooks"][0]["clientConfig"]["caBundle"] == ca["data"]["ca-bundle.crt"]
            && vwc["webhooks"][1]["clientConfig"]["caBundle"] == ca["data"]["ca-bundle.crt"]
            && crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
                == ca["data"]["ca-bundle.crt"]
    })
    .await;
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(ca["data"]["ca-bundle.crt"].as_str().unwrap())
        .unwrap();
    assert!(
        String::from_utf8(bundle)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
}

/// Every operand is owned by the configuration; the scheduler and the roles run as the
/// spec and the operator's settings say.
fn operands_are_owned_and_run_as_the_spec_says(server: &FakeApiServer, owner: Value) {
    for name in [
        "multiarch-scheduler",
        "multiarch-inspector",
        "multiarch-webhook",
        "multiarch-gate-controller",
    ] {
        let deployment = get(server, "apps/deployments", name).unwrap();
        let reference = &deployment["metadata"]["ownerReferences"][0];
        assert_eq!(reference["uid"], owner, "{name}");
        assert_eq!(reference["kind"], "ClusterPodPlacementConfig");
        assert_eq!(reference["controller"], true);
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(
            pod["containers"][0]["image"], "registry.example.com/multiarch:1.2.3",
            "{name}"
        );
        assert_eq!(
            pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchExpressions"][0]["values"],
            json!(install::IMAGE_ARCHITECTURES),
            "{name} runs on every architecture"
        );
        assert_eq!(deployment["spec"]["replicas"], 2);
        for kind in [
            "policy/poddisruptionbudgets",
            "networking.k8s.io/networkpolicies",
            "serviceaccounts",
        ] {
            assert!(get(server, kind, name).is_some(), "{kind} {name}");
        }
    }
    let scheduler = get(server, "apps/deployments", "multiarch-scheduler").unwrap();
    assert!(
        scheduler["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--scheduler-name=multiarch-scheduler"))
    );
    for role in [
        "multiarch-scheduler",
        "multiarch-inspector",
        "multiarch-webhook",
        "multiarch-gate-controller",
    ] {
        assert!(
            get(server, "rbac.authorization.k8s.io/clusterroles", role).is_some(),
            "{role}"
        );
        assert!(
            get(
                server,
                "rbac.authorization.k8s.io/clusterrolebindings",
                role
            )
            .is_some(),
            "{role}"
        );
    }
}

/// `kubectl get clusterpodplacementconfig` shows routing, architectures, availability.
fn printer_columns_show_the_status(server: &FakeApiServer) {
    // `kubectl get clusterpodplacementconfig`: routing, architectures, availability.
    let cppc = get(
        server,
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "cluster",
    )
    .unwrap();
    assert_eq!(cppc["status"]["routing"], "Scheduler");
    assert_eq!(cppc["status"]["architectures"], json!(["amd64", "arm64"]));
    assert_eq!(
        cppc["status"]["observedGeneration"],
        cppc["metadata"]["generation"]
    );
    assert!(
        cppc["metadata"]["finalizers"]
            .as_array()
            .unwrap()
            .contains(&json!("finalizers.multiarch.openshift.io/pod-placement"))
    );
    let crd = multiarch_crd::render::crds()
        .unwrap()
        .into_iter()
        .find(|c| c.spec.names.kind == "ClusterPodPlacementConfig")
        .unwrap();
    let storage = crd.spec.versions.iter().find(|v| v.storage).unwrap();
    let shown: Vec<(String, String)> = storage
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), column(&cppc, &c.json_path)))
        .collect();
    for (name, value) in [
        ("Routing", "Scheduler"),
        ("Architectures", "[\"amd64\",\"arm64\"]"),
        ("Available", "True"),
        ("Degraded", "False"),
        ("Status", "AllComponentsReady"),
    ] {
        assert!(
            shown.contains(&(name.to_owned(), value.to_owned())),
            "{name}: {shown:?}"
        );
    }
    for c in cppc["status"]["conditions"].as_array().unwrap() {
        assert_eq!(
            c["observedGeneration"], cppc["metadata"]["generation"],
            "{c}"
        );
    }
}

/// Every request the operator made is granted by its generated RBAC.
fn every_request_is_granted(server: &FakeApiServer) {
    // Every request the operator made is granted by its generated RBAC.
    let rules = rbac::rules(&[
        install::operator_cluster_rules(),
        install::operator_namespace_rules(),
    ]);
    let operator_requests: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r != "POST /apis/multiarch.openshift.io/v1beta1/clusterpodplacementconfigs")
        .collect();
    rbac::assert_granted(&rules, &operator_requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operand_is_installed_and_pods_are_routed_once_the_scheduler_is_available() {
    let server = Arc::new(cluster().await);
    let rollouts = Rollouts::start(&server);
    rollouts.hold("multiarch-scheduler");
    let operator = start_operator(&server, DRAIN).await;
    create_cppc(
        &server,
        json!({"namespaceSelector": {"matchLabels": {"team": "shop"}},
               "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 50}]}}}),
    )
    .await;
    // A status is written at the end of a pass.
    eventually("the operands and a status", || {
        [
            "multiarch-scheduler",
            "multiarch-inspector",
            "multiarch-webhook",
            "multiarch-gate-controller",
        ]
        .iter()
        .all(|n| get(&server, "apps/deployments", n).is_some())
            && condition(&server, "Available").is_some()
    })
    .await;
    let owner = uid(&server);
    operands_are_owned_and_run_as_the_spec_says(&server, owner.clone());
    let tls = get(&server, "secrets", "multiarch-webhook-tls").unwrap();
    assert_eq!(tls["type"], "kubernetes.io/tls");
    assert_eq!(tls["metadata"]["ownerReferences"][0]["uid"], owner);
    assert!(
        get(&server, "apps/daemonsets", "multiarch-enoexec-daemon").is_none(),
        "the monitor is off"
    );

    // No route while the scheduler is not available, and the status says why.
    eventually("a Degraded condition naming only the scheduler", || {
        condition(&server, "Degraded").is_some_and(|c| {
            c["status"] == "True" && !c["message"].as_str().unwrap().contains("being created")
        })
    })
    .await;
    assert_eq!(route(&server), None);
    let degraded = condition(&server, "Degraded").unwrap();
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .starts_with("Pods are not placed by architecture: the scheduler is not available: Deployment multiarch/multiarch-scheduler has 0 of 2 replicas available"),
        "{degraded}"
    );
    assert_eq!(condition(&server, "Available").unwrap()["status"], "False");

    rollouts.release("multiarch-scheduler");
    eventually("the route", || {
        route(&server).as_deref() == Some("/mutate-pods/scheduler")
    })
    .await;
    eventually("Available", || {
        condition(&server, "Available").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let mwc = get(&server, MWC, "multiarch-webhook").unwrap();
    let hook = &mwc["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Ignore");
    assert_eq!(
        hook["namespaceSelector"]["matchLabels"],
        json!({"team": "shop"})
    );
    assert_eq!(
        hook["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system", "kube-public", "kube-node-lease", "multiarch"])
    );
    assert_eq!(mwc["metadata"]["ownerReferences"][0]["uid"], owner);
    // The API server trusts the CA that signed the webhook's certificate.
    let ca = get(&server, "secrets", "multiarch-ca").unwrap();
    assert_eq!(
        hook["clientConfig"]["caBundle"],
        ca["data"]["ca-bundle.crt"]
    );
    assert_eq!(tls["data"]["ca.crt"], ca["data"]["ca-bundle.crt"]);
    // ... and for the webhooks the operator serves.
    operator_webhooks_trust(&server, &ca).await;

    printer_columns_show_the_status(&server);

    // A new node architecture shows in the status without any other change.
    server.apply("nodes", node("ppc-1", "ppc64le"));
    eventually("ppc64le in the status", || {
        get(
            &server,
            "multiarch.openshift.io/clusterpodplacementconfigs",
            "cluster",
        )
        .unwrap()["status"]["architectures"]
            == json!(["amd64", "arm64", "ppc64le"])
    })
    .await;

    every_request_is_granted(&server);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciling_an_unchanged_configuration_writes_nothing() {
    let server = Arc::new(cluster().await);
    let _rollouts = Rollouts::start(&server);
    let operator = start_operator(&server, DRAIN).await;
    create_cppc(
        &server,
        json!({"plugins": {"execFormatErrorMonitor": {"enabled": true}}, "placement": {"mode": "Scheduler"}}),
    )
    .await;
    eventually("Available", || {
        condition(&server, "Available").is_some_and(|c| c["status"] == "True")
            && condition(&server, "Progressing").is_some_and(|c| c["status"] == "False")
    })
    .await;
    operator.stop().await;
    let before = writes(&server).len();

    // A fresh operator (a new leader) reconciles everything from scratch and checks the
    // certificates (at start and every 2 s): nothing differs, so nothing is written. Its
    // watches' first events may all come before the loop's first pass and wake it once,
    // so one pass is what is certain; a second follows only when they straggle.
    let operator = start_operator(&server, DRAIN).await;
    eventually("a pass", || operator.passes() >= 1).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(operator.passes() >= 1);
    let after = writes(&server);
    assert_eq!(
        after[before..],
        [] as [String; 0],
        "writes on an unchanged reconcile"
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_misplaced_pod_correction_runs_in_the_handler_and_the_status_counts_its_pods() {
    let server = Arc::new(cluster().await);
    let (_rollouts, operator) = installed(
        &server,
        json!({"plugins": {"misplacedPodCorrection": {"enabled": true, "dryRun": false}}}),
        DRAIN,
    )
    .await;
    // The handler without the node daemon: the correction needs no eBPF.
    assert!(get(&server, "apps/deployments", "multiarch-enoexec-handler").is_some());
    assert!(get(&server, "apps/daemonsets", "multiarch-enoexec-daemon").is_none());
    let role = get(
        &server,
        "rbac.authorization.k8s.io/clusterroles",
        "multiarch-enoexec-handler",
    )
    .unwrap();
    assert!(
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["resources"] == json!(["pods/eviction"]) && r["verbs"] == json!(["create"]))
    );
    for name in ["web-1", "web-2"] {
        let mut pod = pending_pod("shop", name, "default-scheduler", Some("web"));
        pod["metadata"]["labels"]["multiarch.openshift.io/misplaced"] = json!("true");
        server.apply("pods", pod);
    }
    eventually("the status counts the misplaced pods", || {
        get(
            &server,
            "multiarch.openshift.io/clusterpodplacementconfigs",
            "cluster",
        )
        .unwrap()["status"]["misplacedPods"]
            == 2
    })
    .await;
    operator.stop().await;
}
