//! `multiarch audit --cluster` against the fake API server and real registries: workloads
//! at the top of their ownership chains, the nodes' architectures as targets, private
//! images read with the pull secret of the workload's service account, attestation
//! entries left out, pods running now on nodes their images cannot run on, and the
//! `--routed-only` and `-n` selections.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::kubeconfig;
use multiarch_test_support::rbac;
use multiarch_test_support::registry;

use std::process::Command;

use base64::Engine;
use multiarch_fake_apiserver::FakeApiServer;
use registry::{Options, PASSWORD, Registry, USER, platform, push_image, push_index};
use serde_json::{Value, json};

fn node(name: &str, arch: &str) -> Value {
    json!({"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch}}})
}

fn template(image: &str, service_account: Option<&str>) -> Value {
    let mut spec = json!({"containers": [{"name": "app", "image": image}]});
    if let Some(sa) = service_account {
        spec["serviceAccountName"] = json!(sa);
    }
    json!({"metadata": {"labels": {"app": "x"}}, "spec": spec})
}

fn owned_by(kind: &str, name: &str) -> Value {
    json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": format!("uid-{name}"), "controller": true}])
}

/// A Deployment, its ReplicaSet and a running pod of it on each of `nodes`.
fn deployment(server: &FakeApiServer, ns: &str, name: &str, image: &str, nodes: &[&str]) {
    server.apply(
        "apps/deployments",
        json!({"metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
               "spec": {"template": template(image, None)}}),
    );
    let rs = format!("{name}-1");
    server.apply(
        "apps/replicasets",
        json!({"metadata": {"name": rs, "namespace": ns, "uid": format!("uid-{rs}"), "ownerReferences": owned_by("Deployment", name)},
               "spec": {"template": template(image, None)}}),
    );
    for (i, node) in nodes.iter().enumerate() {
        server.apply(
            "pods",
            json!({"metadata": {"name": format!("{rs}-{i}"), "namespace": ns, "ownerReferences": owned_by("ReplicaSet", &rs)},
                   "spec": {"nodeName": node, "containers": [{"name": "app", "image": image}]},
                   "status": {"phase": "Running"}}),
        );
    }
}

struct Cluster {
    server: FakeApiServer,
    public: Registry,
    private: Registry,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn kubeconfig(&self) -> String {
        kubeconfig::kubeconfig(self.dir.path(), &self.server)
            .to_str()
            .unwrap()
            .to_owned()
    }

    fn settings(&self) -> String {
        let path = self.dir.path().join("registries.yaml");
        let private = self.private.settings_yaml();
        let private_entry = private.trim_start_matches("registries:\n");
        std::fs::write(
            &path,
            format!("{}{private_entry}", self.public.settings_yaml()),
        )
        .unwrap();
        path.to_str().unwrap().to_owned()
    }
}

/// In `public`: an OCI index with a buildx attestation entry, a single amd64 manifest; in
/// `private`: a Docker manifest list.
async fn push_images(public: &Registry, private: &Registry) {
    // An OCI index with a buildx attestation entry; a single amd64 manifest.
    let amd = push_image(public, "shop/web", "linux", "amd64", None, false, None).await;
    let arm = push_image(public, "shop/web", "linux", "arm64", None, false, None).await;
    let att = push_image(public, "shop/web", "unknown", "unknown", None, false, None).await;
    let attestation = json!({"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": amd.digest});
    push_index(
        public,
        "shop/web",
        "1",
        false,
        &[
            (amd, platform("linux", "amd64", None), None),
            (arm, platform("linux", "arm64", None), None),
            (att, platform("unknown", "unknown", None), Some(attestation)),
        ],
    )
    .await;
    push_image(
        public,
        "shop/legacy",
        "linux",
        "amd64",
        None,
        false,
        Some("1"),
    )
    .await;
    // A private Docker manifest list.
    let amd = push_image(private, "team/model", "linux", "amd64", None, true, None).await;
    let arm = push_image(private, "team/model", "linux", "arm64", None, true, None).await;
    push_index(
        private,
        "team/model",
        "1",
        true,
        &[
            (amd, platform("linux", "amd64", None), None),
            (arm, platform("linux", "arm64", None), None),
        ],
    )
    .await;
}

async fn cluster() -> Cluster {
    let public = Registry::start(Options::default());
    let private = Registry::start(Options {
        basic_auth: true,
        ..Options::default()
    });
    push_images(&public, &private).await;

    let server = FakeApiServer::start().await;
    server.apply("nodes", node("amd-1", "amd64"));
    server.apply("nodes", node("arm-1", "arm64"));
    for (ns, team) in [("shop", "shop"), ("lab", "lab")] {
        server.apply(
            "namespaces",
            json!({"metadata": {"name": ns, "labels": {"team": team, "kubernetes.io/metadata.name": ns}}}),
        );
    }
    let web = format!("{}/shop/web:1", public.addr);
    let legacy = format!("{}/shop/legacy:1", public.addr);
    let model = format!("{}/team/model:1", private.addr);
    deployment(&server, "shop", "web", &web, &["amd-1", "arm-1"]);
    // amd64 only, and one of its pods runs on arm64 now.
    deployment(&server, "shop", "legacy", &legacy, &["amd-1", "arm-1"]);
    // The private image, read with the pull secret of the service account.
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let config = json!({"auths": {private.addr.clone(): {"auth": auth}}}).to_string();
    server.apply(
        "secrets",
        json!({"metadata": {"name": "regcred", "namespace": "shop"}, "type": "kubernetes.io/dockerconfigjson",
               "data": {".dockerconfigjson": base64::engine::general_purpose::STANDARD.encode(config)}}),
    );
    server.apply(
        "serviceaccounts",
        json!({"metadata": {"name": "builder", "namespace": "shop"}, "imagePullSecrets": [{"name": "regcred"}]}),
    );
    server.apply(
        "apps/statefulsets",
        json!({"metadata": {"name": "model", "namespace": "shop", "uid": "uid-model"},
               "spec": {"template": template(&model, Some("builder"))}}),
    );
    // The template's own pull secret.
    let mut tune = template(&model, None);
    tune["spec"]["imagePullSecrets"] = json!([{"name": "regcred"}]);
    server.apply(
        "batch/jobs",
        json!({"metadata": {"name": "tune", "namespace": "shop", "uid": "uid-tune"},
               "spec": {"template": tune}}),
    );
    // The same private image without credentials: unknown, with the reason.
    server.apply(
        "batch/cronjobs",
        json!({"metadata": {"name": "train", "namespace": "lab", "uid": "uid-train"},
               "spec": {"jobTemplate": {"spec": {"template": template(&model, None)}}}}),
    );
    server.apply(
        "batch/jobs",
        json!({"metadata": {"name": "train-1", "namespace": "lab", "uid": "uid-train-1",
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "train", "uid": "uid-train", "controller": true}]},
               "spec": {"template": template(&model, None)}}),
    );
    // More pods than one list page holds: the audit pages through them.
    for i in 0..520 {
        server.apply(
            "pods",
            json!({"metadata": {"name": format!("web-1-extra-{i}"), "namespace": "shop", "ownerReferences": owned_by("ReplicaSet", "web-1")},
                   "spec": {"nodeName": "amd-1", "containers": [{"name": "app", "image": web}]},
                   "status": {"phase": "Running"}}),
        );
    }
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
               "metadata": {"name": "cluster"},
               "spec": {"namespaceSelector": {"matchLabels": {"team": "shop"}}}}),
    );
    Cluster {
        server,
        public,
        private,
        dir: tempfile::tempdir().unwrap(),
    }
}

/// Runs `multiarch audit --cluster` off the test's runtime (the fake serves on it).
async fn audit(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_multiarch"));
    command
        .args(["audit", "--cluster", "--kubeconfig", &cluster.kubeconfig()])
        .args([
            "--registries-config",
            &cluster.settings(),
            "--timeout",
            "10s",
        ])
        .args(args)
        .env_remove("REGISTRY_AUTH_FILE");
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

fn report(out: &std::process::Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ids(report: &Value) -> Vec<String> {
    report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| format!("{}/{}/{}", w["namespace"], w["kind"], w["name"]).replace('"', ""))
        .collect()
}

fn workload<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| format!("{}/{}/{}", w["namespace"], w["kind"], w["name"]).replace('"', "") == id)
        .unwrap_or_else(|| panic!("{id} not in {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_cluster_is_audited_against_its_nodes() {
    let cluster = cluster().await;
    let report = report(&audit(&cluster, &["-o", "json"]).await);
    assert_eq!(report["targets"], json!(["amd64", "arm64"]));
    assert_eq!(report["clusterNodes"], json!({"amd64": 1, "arm64": 1}));
    assert_eq!(
        ids(&report),
        [
            "shop/Deployment/legacy",
            "shop/Deployment/web",
            "shop/StatefulSet/model",
            "lab/CronJob/train",
            "shop/Job/tune"
        ]
    );
    // Attestation entries are not platforms.
    let web = workload(&report, "shop/Deployment/web");
    assert_eq!(web["verdict"], "runsOnAll");
    assert_eq!(web["images"][0]["platforms"], json!(["amd64", "arm64"]));
    assert!(web.get("misplacedPods").is_none(), "{web}");
    // A pod on arm64 with an amd64-only image: misplaced now.
    let legacy = workload(&report, "shop/Deployment/legacy");
    assert_eq!(legacy["verdict"], "restricted");
    assert_eq!(legacy["cannot"], json!(["arm64"]));
    assert_eq!(
        legacy["misplacedPods"],
        json!([{"pod": "legacy-1-1", "node": "arm-1", "architecture": "arm64"}])
    );
    assert_eq!(report["verdicts"]["misplacedNow"], 1);
    // The private image with the service account's pull secret, and without one.
    let model = workload(&report, "shop/StatefulSet/model");
    assert_eq!(model["verdict"], "runsOnAll", "{model}");
    let tune = workload(&report, "shop/Job/tune");
    assert_eq!(tune["verdict"], "runsOnAll", "{tune}");
    let train = workload(&report, "lab/CronJob/train");
    assert_eq!(train["verdict"], "unknown");
    assert!(
        train["reason"]
            .as_str()
            .unwrap()
            .contains("unauthorized at 127.0.0.1"),
        "{train}"
    );
    // Every page of pods was read: their images were inspected once (one manifest
    // request for the index, two for the single manifest: manifest and config).
    let manifest_gets = |requests: &[String]| {
        requests
            .iter()
            .filter(|r| r.starts_with("GET ") && r.contains("/manifests/1"))
            .count()
    };
    let requests = cluster.public.requests_when(|r| manifest_gets(r) >= 2);
    assert_eq!(manifest_gets(&requests), 2, "{requests:?}");
    let requests = cluster.server.requests();
    assert!(
        requests.iter().filter(|r| *r == "GET /api/v1/pods").count() >= 2,
        "the pods were not paged: {requests:?}"
    );

    // The table says it in words.
    let out = audit(&cluster, &[]).await;
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("misplaced now: legacy-1-1 on arm-1 (arm64)"),
        "{table}"
    );
    assert!(
        table.contains("cluster nodes: amd64 1, arm64 1; 1 workloads have pods running now on nodes their images cannot run on"),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_only_and_one_namespace_select_the_workloads() {
    let cluster = cluster().await;
    let routed = report(&audit(&cluster, &["--routed-only", "-o", "json"]).await);
    assert_eq!(
        ids(&routed),
        [
            "shop/Deployment/legacy",
            "shop/Deployment/web",
            "shop/StatefulSet/model",
            "shop/Job/tune"
        ]
    );
    // The generated ClusterRole grants everything the audit asked for (it lists; it
    // never watches).
    let rules = rbac::rules(&[multiarch_operator::install::audit_rules()]);
    rbac::assert_granted_without_watches(&rules, &cluster.server.requests());
    let lab = report(&audit(&cluster, &["-n", "lab", "--arch", "arm64", "-o", "json"]).await);
    assert_eq!(ids(&lab), ["lab/CronJob/train"]);
    assert_eq!(lab["targets"], json!(["arm64"]));

    // No configuration: routing is off, and the audit says so rather than listing none.
    cluster.server.delete(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        "",
        "cluster",
    );
    let out = audit(&cluster, &["--routed-only"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("there is no ClusterPodPlacementConfig named cluster"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_error_ends_the_audit_with_its_reason() {
    let cluster = cluster().await;
    cluster.server.inject(multiarch_fake_apiserver::Fault::new(
        Some(multiarch_fake_apiserver::Method::GET),
        "/apis/batch/v1/cronjobs",
        multiarch_fake_apiserver::Effect::Status(403),
    ));
    let out = audit(&cluster, &[]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot list cronjobs"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// Pods running now on an amd64 node that does not say its x86-64 level are judged as
/// placement judges them: the ClusterPodPlacementConfig's `unknownNodeLevel`, or the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_unknown_level_is_read_as_placement_reads_it() {
    let cluster = cluster().await;
    let v3 = push_image(
        &cluster.public,
        "shop/ubi10",
        "linux",
        "amd64",
        Some("v3"),
        false,
        None,
    )
    .await;
    push_index(
        &cluster.public,
        "shop/ubi10",
        "1",
        false,
        &[(v3, platform("linux", "amd64", Some("v3")), None)],
    )
    .await;
    let image = format!("{}/shop/ubi10:1", cluster.public.addr);
    // amd-1 carries neither multiarch's level label nor NFD's CPUID labels.
    deployment(&cluster.server, "shop", "modern", &image, &["amd-1"]);
    let misplaced =
        |report: &Value| workload(report, "shop/Deployment/modern")["misplacedPods"].clone();

    // The ClusterPodPlacementConfig says nothing: every level.
    let read = report(&audit(&cluster, &["-o", "json"]).await);
    assert_eq!(read["unknownNodeLevel"], "AnyLevel");
    assert_eq!(misplaced(&read), Value::Null, "{read}");

    // binaryInspection takes such nodes as the baseline: the v3 pod is misplaced there.
    cluster.server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
               "metadata": {"name": "cluster"},
               "spec": {"namespaceSelector": {"matchLabels": {"team": "shop"}},
                        "plugins": {"binaryInspection": {"enabled": true, "unknownNodeLevel": "Baseline"}}}}),
    );
    let read = report(&audit(&cluster, &["-o", "json"]).await);
    assert_eq!(read["unknownNodeLevel"], "Baseline");
    assert_eq!(
        misplaced(&read),
        json!([{"pod": "modern-1-0", "node": "amd-1", "architecture": "amd64/v1"}])
    );
    let table = String::from_utf8(audit(&cluster, &[]).await.stdout).unwrap();
    assert!(
        table.contains("misplaced now: modern-1-0 on amd-1 (amd64/v1)")
            && table.contains("amd64 nodes that do not say their x86-64 level are read as x86-64-v1 (unknownNodeLevel: Baseline)"),
        "{table}"
    );

    // The flag wins over the configuration.
    let read = report(
        &audit(
            &cluster,
            &["-o", "json", "--unknown-node-level", "AnyLevel"],
        )
        .await,
    );
    assert_eq!(read["unknownNodeLevel"], "AnyLevel");
    assert_eq!(misplaced(&read), Value::Null, "{read}");
}
