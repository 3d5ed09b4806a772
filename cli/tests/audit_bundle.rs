//! `multiarch audit --bundle DIR` and `--bundle-image REF` as an operator author's CI runs
//! them, against real registries: bundles written here (a correct 4-arch bundle, false
//! promises, missing labels, affinity and relatedImages mistakes, a private image), the
//! findings and exit codes each gets, a bundle image pushed and audited by reference, and
//! `--cluster` naming the node architectures the operands can run on.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::kubeconfig;
use multiarch_test_support::registry;

use std::process::Command;

use base64::Engine;
use multiarch_fake_apiserver::FakeApiServer;
use registry::{
    Options, PASSWORD, Registry, USER, bundle_labels, platform, push_image, push_image_with_files,
    push_index,
};
use serde_json::{Value, json};

const ALL: [&str; 4] = ["amd64", "arm64", "ppc64le", "s390x"];

/// Pushes an index of `archs` under `tag`; its digest reference.
async fn multi(reg: &Registry, repository: &str, tag: &str, archs: &[&str]) -> String {
    let mut entries = Vec::new();
    for arch in archs {
        let pushed = push_image(reg, repository, "linux", arch, None, false, None).await;
        entries.push((pushed, platform("linux", arch, None), None));
    }
    let index = push_index(reg, repository, tag, false, &entries).await;
    format!("{}/{repository}@{}", reg.addr, index.digest)
}

/// What a test bundle says.
struct Csv<'a> {
    archs: &'a [&'a str],
    /// The install deployment's images (container name, image).
    containers: &'a [(&'a str, &'a str)],
    /// Its required `kubernetes.io/arch` values; `None`: no affinity.
    affinity: Option<&'a [&'a str]>,
    related: &'a [&'a str],
}

impl Csv<'_> {
    fn yaml(&self) -> String {
        let mut labels = serde_json::Map::new();
        for arch in self.archs {
            labels.insert(
                format!("operatorframework.io/arch.{arch}"),
                json!("supported"),
            );
        }
        if !self.archs.is_empty() {
            labels.insert("operatorframework.io/os.linux".into(), json!("supported"));
        }
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, image)| json!({"name": name, "image": image}))
            .collect();
        let mut spec = json!({"containers": containers});
        if let Some(archs) = self.affinity {
            spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": archs},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}});
        }
        let related: Vec<Value> = self
            .related
            .iter()
            .enumerate()
            .map(|(i, image)| json!({"name": format!("image-{i}"), "image": image}))
            .collect();
        let csv = json!({
            "apiVersion": "operators.coreos.com/v1alpha1",
            "kind": "ClusterServiceVersion",
            "metadata": {"name": "shop-operator.v1.0.0", "labels": labels},
            "spec": {"install": {"strategy": "deployment", "spec": {"deployments": [
                {"name": "shop-controller", "spec": {"selector": {"matchLabels": {"app": "shop"}},
                 "template": {"metadata": {"labels": {"app": "shop"}}, "spec": spec}}}]}},
                "relatedImages": related}});
        serde_yaml_ng::to_string(&csv).unwrap()
    }

    /// The bundle directory: the CSV, a CRD and metadata/annotations.yaml.
    fn write(&self, dir: &std::path::Path) -> String {
        std::fs::create_dir_all(dir.join("manifests")).unwrap();
        std::fs::create_dir_all(dir.join("metadata")).unwrap();
        std::fs::write(
            dir.join("manifests/shop.clusterserviceversion.yaml"),
            self.yaml(),
        )
        .unwrap();
        std::fs::write(
            dir.join("manifests/shops.example.com.crd.yaml"),
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: shops.example.com}\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("metadata/annotations.yaml"),
            "annotations:\n  operators.operatorframework.io.bundle.package.v1: shop\n",
        )
        .unwrap();
        dir.to_str().unwrap().to_owned()
    }
}

struct Run {
    code: Option<i32>,
    report: Value,
    stderr: String,
}

impl Run {
    /// The findings' codes, sorted.
    fn codes(&self) -> Vec<String> {
        let mut codes: Vec<String> = self.report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["code"].as_str().unwrap().to_owned())
            .collect();
        codes.sort();
        codes
    }

    fn finding(&self, code: &str) -> &Value {
        self.report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == code)
            .unwrap_or_else(|| panic!("no {code} in {}", self.report["findings"]))
    }

    fn verdict(&self, arch: &str) -> &str {
        self.report["architectures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["architecture"] == arch)
            .and_then(|a| a["verdict"].as_str())
            .unwrap_or_else(|| panic!("no verdict for {arch}: {}", self.report["architectures"]))
    }
}

fn audit(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .arg("audit")
        .args(args)
        .args(["--timeout", "10s", "-o", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    Run {
        code: out.status.code(),
        report,
        stderr,
    }
}

/// Registry settings trusting both test registries (plain HTTP).
fn settings(dir: &std::path::Path, registries: &[&Registry]) -> String {
    let mut text = String::from("registries:\n");
    for r in registries {
        text.push_str(&format!(
            "  - registry: \"{}\"\n    insecure: true\n",
            r.addr
        ));
    }
    let path = dir.join("registries.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A registry holding the operator's image (every architecture) and a sidecar's (amd64
/// and arm64), and the settings to read it; `run` audits a bundle of a CSV.
struct Bundles {
    reg: Registry,
    dir: tempfile::TempDir,
    settings: String,
    operator: String,
    two: String,
}

impl Bundles {
    async fn start() -> Bundles {
        let reg = Registry::start(Options::default());
        let dir = tempfile::tempdir().unwrap();
        let operator = multi(&reg, "ops/operator", "1", &ALL).await;
        let two = multi(&reg, "ops/sidecar", "1", &["amd64", "arm64"]).await;
        let settings = settings(dir.path(), &[&reg]);
        Bundles {
            reg,
            dir,
            settings,
            operator,
            two,
        }
    }

    fn run(&self, csv: Csv<'_>, name: &str, extra: &[&str]) -> Run {
        let bundle = csv.write(&self.dir.path().join(name));
        let mut args = vec![
            "--bundle",
            bundle.as_str(),
            "--registries-config",
            self.settings.as_str(),
        ];
        args.extend_from_slice(extra);
        audit(&args)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundles_are_judged_by_their_images_and_ci_fails_on_false_promises() {
    let bundles = Bundles::start().await;
    a_correct_bundle_runs_everywhere(&bundles);
    a_false_promise_fails(&bundles);
    an_unlabelled_bundle_warns(&bundles);
    no_affinity_is_suggested(&bundles);
    an_unbuilt_allowed_arch_fails_ci(&bundles);
    a_related_tag_warns(&bundles);
    a_single_platform_image_fails(&bundles).await;
    a_mislabelled_build_breaks_a_promise_with_binaries(&bundles).await;
}

/// `--binaries`: an index entry labelled arm64 whose program is amd64 does not keep an
/// arm64 promise; without it the index is believed.
async fn a_mislabelled_build_breaks_a_promise_with_binaries(bundles: &Bundles) {
    use multiarch_test_support::elf;
    use registry::{TarEntry, gzip, layer_tar, push_image_with_layers};
    let run = json!({"Entrypoint": ["/manager"]});
    let amd64 = gzip(&layer_tar(&[TarEntry::File(
        "manager",
        &elf::x86_64(None, 0b0001),
    )]));
    let mut entries = Vec::new();
    for arch in ["amd64", "arm64"] {
        let pushed = push_image_with_layers(
            &bundles.reg,
            "ops/agent",
            arch,
            run.clone(),
            std::slice::from_ref(&amd64),
        )
        .await;
        entries.push((pushed, platform("linux", arch, None), None));
    }
    let index = push_index(&bundles.reg, "ops/agent", "1", false, &entries).await;
    let agent = format!("{}/ops/agent@{}", bundles.reg.addr, index.digest);
    let (containers, related) = ([("manager", agent.as_str())], [agent.as_str()]);
    let csv = || Csv {
        archs: &["amd64", "arm64"],
        containers: &containers,
        affinity: Some(&["amd64", "arm64"]),
        related: &related,
    };
    let believed = bundles.run(csv(), "agent-believed", &[]);
    assert_eq!(believed.code, Some(0), "{}", believed.stderr);
    assert_eq!(believed.verdict("arm64"), "runs");

    let read = bundles.run(csv(), "agent-read", &["--binaries"]);
    assert_eq!(read.code, Some(3), "{}", read.stderr);
    assert_eq!(read.verdict("arm64"), "cannotRun");
    let lacks = read.finding("image-lacks-claimed-platform");
    assert!(
        lacks["message"].as_str().unwrap().contains("linux/arm64"),
        "{lacks}"
    );
    assert_eq!(
        read.report["images"][0]["mislabelledBuilds"],
        json!([format!(
            "image {agent}'s arm64 build runs a program built for amd64 (/manager): not counted as runnable"
        )])
    );
}

fn a_correct_bundle_runs_everywhere(bundles: &Bundles) {
    // A correct 4-arch bundle: no finding, runs everywhere, CI passes.
    let good = bundles.run(
        Csv {
            archs: &ALL,
            containers: &[("manager", &bundles.operator)],
            affinity: Some(&ALL),
            related: &[&bundles.operator],
        },
        "good",
        &["--require-arch", "s390x"],
    );
    assert_eq!(good.code, Some(0), "{}", good.stderr);
    assert_eq!(good.codes(), Vec::<String>::new(), "{}", good.report);
    for arch in ALL {
        assert_eq!(good.verdict(arch), "runs");
    }
    assert_eq!(
        good.report["apiVersion"],
        "multiarch.openshift.io/audit-bundle/v1"
    );
    assert_eq!(good.report["package"], "shop");
    assert_eq!(
        good.report["suggestion"]["labels"]["operatorframework.io/arch.s390x"],
        "supported"
    );
}

fn a_false_promise_fails(bundles: &Bundles) {
    // Labels claim s390x while the sidecar lacks it: an error, exit 3, s390x cannot run.
    let false_promise = bundles.run(
        Csv {
            archs: &["amd64", "s390x"],
            containers: &[("manager", &bundles.operator), ("sidecar", &bundles.two)],
            affinity: Some(&["amd64", "s390x"]),
            related: &[&bundles.operator, &bundles.two],
        },
        "false-promise",
        &[],
    );
    assert_eq!(false_promise.code, Some(3), "{}", false_promise.stderr);
    assert!(
        false_promise.stderr.contains("1 error finding(s)"),
        "{}",
        false_promise.stderr
    );
    let lacks = false_promise.finding("image-lacks-claimed-platform");
    assert_eq!(lacks["severity"], "error");
    assert_eq!(lacks["subject"], bundles.two.as_str());
    assert!(lacks["message"].as_str().unwrap().contains("linux/s390x"));
    // Every image has arm64, which no label claims.
    assert_eq!(
        false_promise.codes(),
        [
            "affinity-allows-unbuilt-arch",
            "image-lacks-claimed-platform",
            "unclaimed-platform"
        ]
    );
    assert_eq!(false_promise.verdict("amd64"), "runs");
    assert_eq!(false_promise.verdict("s390x"), "cannotRun");
    // The table a person reads (docs/audit.md shows this output).
    let out = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args(["audit", "--bundle"])
        .arg(bundles.dir.path().join("false-promise"))
        .args(["--registries-config", &bundles.settings])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let table = String::from_utf8_lossy(&out.stdout);
    println!("{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("ERROR") && l.contains("image-lacks-claimed-platform")),
        "{table}"
    );
    assert!(table.contains("s390x: cannot run"), "{table}");
}

fn an_unlabelled_bundle_warns(bundles: &Bundles) {
    // Unlabelled (OLM: amd64 only) while every image has amd64 and arm64: a warning that
    // names the unclaimed arm64; the promise (amd64) holds, so CI passes.
    let unlabelled = bundles.run(
        Csv {
            archs: &[],
            containers: &[("manager", &bundles.two)],
            affinity: Some(&["amd64"]),
            related: &[&bundles.two],
        },
        "unlabelled",
        &[],
    );
    assert_eq!(unlabelled.code, Some(0), "{}", unlabelled.stderr);
    assert_eq!(unlabelled.codes(), ["unclaimed-platform"]);
    let unclaimed = unlabelled.finding("unclaimed-platform");
    assert_eq!(unclaimed["severity"], "warning");
    assert!(
        unclaimed["message"].as_str().unwrap().contains("arm64"),
        "{unclaimed}"
    );
    assert_eq!(unlabelled.report["claims"]["architecturesLabelled"], false);
    assert_eq!(
        unlabelled.report["claims"]["architectures"],
        json!(["amd64"])
    );
}

fn no_affinity_is_suggested(bundles: &Bundles) {
    // No node affinity: a warning; the suggestion has the block to paste.
    let no_affinity = bundles.run(
        Csv {
            archs: &["amd64", "arm64"],
            containers: &[("manager", &bundles.two)],
            affinity: None,
            related: &[&bundles.two],
        },
        "no-affinity",
        &[],
    );
    assert_eq!(no_affinity.code, Some(0), "{}", no_affinity.stderr);
    assert_eq!(no_affinity.codes(), ["missing-arch-affinity"]);
    assert_eq!(
        no_affinity.report["suggestion"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
        json!(["amd64", "arm64"])
    );
}

fn an_unbuilt_allowed_arch_fails_ci(bundles: &Bundles) {
    // The affinity allows ppc64le without a ppc64le build: a warning, and a CI job that
    // requires ppc64le fails.
    let ppc = bundles.run(
        Csv {
            archs: &["amd64", "arm64"],
            containers: &[("manager", &bundles.two)],
            affinity: Some(&["amd64", "arm64", "ppc64le"]),
            related: &[&bundles.two],
        },
        "ppc",
        &["--require-arch", "ppc64le"],
    );
    assert_eq!(ppc.code, Some(3), "{}", ppc.stderr);
    assert_eq!(ppc.codes(), ["affinity-allows-unbuilt-arch"]);
    assert!(
        ppc.finding("affinity-allows-unbuilt-arch")["message"]
            .as_str()
            .unwrap()
            .contains("allows ppc64le")
    );
    assert_eq!(ppc.verdict("ppc64le"), "cannotRun");
    assert!(
        ppc.stderr.contains("cannot be shown to run on ppc64le"),
        "{}",
        ppc.stderr
    );
}

fn a_related_tag_warns(bundles: &Bundles) {
    // A tag in relatedImages (and the digest the deployment runs not listed): warnings.
    let tag = format!("{}/ops/sidecar:1", bundles.reg.addr);
    let tagged = bundles.run(
        Csv {
            archs: &["amd64", "arm64"],
            containers: &[("manager", &bundles.two)],
            affinity: Some(&["amd64", "arm64"]),
            related: &[&tag],
        },
        "tagged",
        &[],
    );
    assert_eq!(tagged.code, Some(0), "{}", tagged.stderr);
    assert_eq!(
        tagged.codes(),
        ["related-image-missing", "related-image-not-digest"]
    );
    assert_eq!(
        tagged.finding("related-image-not-digest")["subject"],
        tag.as_str()
    );
}

async fn a_single_platform_image_fails(bundles: &Bundles) {
    // A single-platform image while two architectures are labelled: both errors.
    let single = push_image(
        &bundles.reg,
        "ops/legacy",
        "linux",
        "amd64",
        None,
        false,
        Some("1"),
    )
    .await;
    let legacy = format!("{}/ops/legacy@{}", bundles.reg.addr, single.digest);
    let single_run = bundles.run(
        Csv {
            archs: &["amd64", "arm64"],
            containers: &[("manager", &legacy)],
            affinity: Some(&["amd64", "arm64"]),
            related: &[&legacy],
        },
        "single",
        &[],
    );
    assert_eq!(single_run.code, Some(3));
    assert_eq!(
        single_run.codes(),
        [
            "affinity-allows-unbuilt-arch",
            "image-lacks-claimed-platform",
            "single-platform-image"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_image_needs_its_pull_secret_and_unknown_never_passes() {
    let private = Registry::start(Options {
        basic_auth: true,
        ..Options::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let image = multi(&private, "team/operator", "1", &["amd64", "arm64"]).await;
    let settings = settings(dir.path(), &[&private]);
    let bundle = Csv {
        archs: &["amd64", "arm64"],
        containers: &[("manager", &image)],
        affinity: Some(&["amd64", "arm64"]),
        related: &[&image],
    }
    .write(&dir.path().join("private"));
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let authfile = dir.path().join("auth.json");
    std::fs::write(
        &authfile,
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{token}"}}}}}}"#,
            private.addr
        ),
    )
    .unwrap();

    let with_secret = audit(&[
        "--bundle",
        &bundle,
        "--registries-config",
        &settings,
        "--authfile",
        authfile.to_str().unwrap(),
        "--require-arch",
        "arm64",
    ]);
    assert_eq!(with_secret.code, Some(0), "{}", with_secret.stderr);
    assert_eq!(with_secret.codes(), Vec::<String>::new());
    assert_eq!(with_secret.verdict("arm64"), "runs");

    let without = audit(&[
        "--bundle",
        &bundle,
        "--registries-config",
        &settings,
        "--require-arch",
        "arm64",
    ]);
    assert_eq!(without.code, Some(3), "{}", without.stderr);
    assert_eq!(without.codes(), ["image-not-inspected"]);
    assert!(
        without.finding("image-not-inspected")["message"]
            .as_str()
            .unwrap()
            .contains(&private.addr),
        "{}",
        without.report
    );
    assert_eq!(without.verdict("arm64"), "unknown");
    assert!(without.report.get("suggestion").is_none());
}

/// An operator image (amd64, s390x) and its bundle image, as `operator-sdk bundle`
/// builds it: FROM scratch, one layer, amd64 only.
async fn push_bundle_image(reg: &Registry) {
    let operator = multi(reg, "ops/operator", "1", &["amd64", "s390x"]).await;
    let csv = Csv {
        archs: &["amd64", "s390x"],
        containers: &[("manager", &operator)],
        affinity: Some(&["amd64", "s390x"]),
        related: &[&operator],
    }
    .yaml();
    // As `operator-sdk bundle` builds it: FROM scratch, one layer, amd64 only.
    push_image_with_files(
        reg,
        "ops/operator-bundle",
        "v1.0.0",
        "amd64",
        bundle_labels("shop"),
        &[
            ("manifests/shop.clusterserviceversion.yaml", &csv),
            (
                "metadata/annotations.yaml",
                "annotations:\n  operators.operatorframework.io.bundle.package.v1: shop\n",
            ),
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_image_is_read_from_the_registry_and_judged_against_the_cluster() {
    let reg = Registry::start(Options::default());
    let dir = tempfile::tempdir().unwrap();
    push_bundle_image(&reg).await;
    let settings = settings(dir.path(), &[&reg]);
    let reference = format!("{}/ops/operator-bundle:v1.0.0", reg.addr);

    let server = FakeApiServer::start().await;
    for (name, arch) in [
        ("amd-1", "amd64"),
        ("arm-1", "arm64"),
        ("z-1", "s390x"),
        ("z-2", "s390x"),
    ] {
        server.apply(
            "nodes",
            json!({"metadata": {"name": name, "labels": {"kubernetes.io/arch": arch}}}),
        );
    }
    let config = kubeconfig::kubeconfig(dir.path(), &server);
    let run = audit(&[
        "--bundle-image",
        &reference,
        "--registries-config",
        &settings,
        "--cluster",
        "--kubeconfig",
        config.to_str().unwrap(),
    ]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.report["source"], reference.as_str());
    assert_eq!(run.report["package"], "shop");
    assert_eq!(run.codes(), Vec::<String>::new(), "{}", run.report);
    assert_eq!(
        run.report["clusterNodes"],
        json!({"amd64": 1, "arm64": 1, "s390x": 2})
    );
    assert_eq!(run.verdict("amd64"), "runs");
    assert_eq!(run.verdict("s390x"), "runs");
    assert_eq!(run.verdict("arm64"), "cannotRun");

    // The table a person reads says the same.
    let out = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args([
            "audit",
            "--bundle-image",
            &reference,
            "--registries-config",
            &settings,
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("no findings"), "{table}");
    assert!(
        table.contains("operatorframework.io/arch.s390x: supported"),
        "{table}"
    );

    // An application image is not a bundle: a clear error, exit 1.
    push_image_with_files(
        &reg,
        "ops/app",
        "1",
        "amd64",
        json!({}),
        &[("usr/bin/app", "#!/bin/sh\n")],
    )
    .await;
    let out = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .args([
            "audit",
            "--bundle-image",
            &format!("{}/ops/app:1", reg.addr),
            "--registries-config",
            &settings,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no ClusterServiceVersion"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
