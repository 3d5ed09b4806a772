//! `multiarch audit` as a user runs it: offline with a platforms file (what `helm
//! template` prints, piped in, non-workload kinds counted), the CI gate's exit code, and
//! against a real registry with one registry unreachable.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use multiarch_test_support::registry;

use std::{
    io::Write,
    process::{Command, Stdio},
};

use registry::{Options, Registry, platform, push_image, push_index};

/// Two workloads of a chart, plus the kinds a chart also renders.
const CHART: &str = r#"---
# Source: shop/templates/service.yaml
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
---
# Source: shop/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  template:
    spec:
      initContainers: [{name: migrate, image: "migrate:1"}]
      containers: [{name: web, image: "web:1"}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: ops}
spec:
  template:
    spec:
      nodeSelector: {kubernetes.io/arch: arm64}
      containers: [{name: agent, image: "agent:1"}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
"#;

const PLATFORMS: &str = r#"images:
  "migrate:1": [linux/amd64, linux/arm64]
  "web:1": [linux/amd64, linux/arm64, linux/s390x]
  "agent:1": [linux/amd64]
"#;

/// Writes [`PLATFORMS`] into `dir`; its path.
fn platforms_file(dir: &std::path::Path) -> String {
    let path = dir.join("platforms.yaml");
    std::fs::write(&path, PLATFORMS).unwrap();
    path.to_str().unwrap().to_owned()
}

fn audit(args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_multiarch"))
        .arg("audit")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

#[test]
fn helm_output_piped_in_is_audited_offline() {
    let dir = tempfile::tempdir().unwrap();
    let platforms = platforms_file(dir.path());
    let platforms = platforms.as_str();

    let out = audit(
        &["-f", "-", "--platforms", platforms, "-o", "json"],
        Some(CHART),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["apiVersion"], "multiarch.openshift.io/audit/v1");
    let web = &report["workloads"][0];
    assert_eq!(
        (
            web["namespace"].as_str(),
            web["kind"].as_str(),
            web["name"].as_str()
        ),
        (Some("default"), Some("Deployment"), Some("web"))
    );
    assert_eq!(web["verdict"], "restricted");
    assert_eq!(web["architectures"], serde_json::json!(["amd64", "arm64"]));
    assert_eq!(web["cannot"], serde_json::json!(["ppc64le", "s390x"]));
    assert_eq!(
        web["routedConstraint"],
        serde_json::json!(["amd64", "arm64"])
    );
    let agent = &report["workloads"][1];
    assert_eq!(agent["pinContradictsImages"], true);
    assert_eq!(report["verdicts"]["pinContradictsImages"], 1);
    assert_eq!(
        report["ignored"],
        serde_json::json!({"ConfigMap": 1, "Service": 1})
    );

    // The table, from a file this time.
    let chart = dir.path().join("chart.yaml");
    std::fs::write(&chart, CHART).unwrap();
    let out = audit(
        &[
            "-f",
            chart.to_str().unwrap(),
            "--platforms",
            platforms,
            "--arch",
            "amd64,arm64",
        ],
        None,
    );
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("default/Deployment/web"), "{table}");
    assert!(
        table.contains("arm64: 1 of 2 workloads can run there; blocked by agent:1 (1)"),
        "{table}"
    );
    assert!(
        table.contains("not workloads (ignored): ConfigMap 1, Service 1"),
        "{table}"
    );
}

#[test]
fn require_arch_fails_the_ci_job_and_names_the_workloads() {
    let dir = tempfile::tempdir().unwrap();
    let platforms = platforms_file(dir.path());
    let platforms = platforms.as_str();
    let out = audit(
        &[
            "-f",
            "-",
            "--platforms",
            platforms,
            "--require-arch",
            "arm64",
            "-o",
            "markdown",
        ],
        Some(CHART),
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "1 workload(s) cannot run on arm64: ops/DaemonSet/agent"
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("## multiarch audit"));
    let out = audit(
        &[
            "-f",
            "-",
            "--platforms",
            platforms,
            "--require-arch",
            "amd64",
        ],
        Some(CHART),
    );
    assert_eq!(out.status.code(), Some(0));
    // An image the file does not know is unknown, with the reason.
    let out = audit(
        &["-f", "-", "--platforms", platforms, "-o", "yaml"],
        Some("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: 'other:1'}]}\n"),
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert!(yaml.contains("verdict: unknown"), "{yaml}");
    assert!(yaml.contains("reason: 'other:1: not in "), "{yaml}");
    // Manifests that are not YAML: an error, exit 1.
    let out = audit(
        &["-f", "-", "--platforms", platforms],
        Some("kind: Pod\n---\n: : :\n"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("document 2 is not valid YAML"));
}

#[tokio::test]
async fn images_are_inspected_on_the_registry_and_an_unreachable_one_is_unknown() {
    let reg = Registry::start(Options::default());
    let amd = push_image(&reg, "shop/web", "linux", "amd64", None, false, None).await;
    let arm = push_image(&reg, "shop/web", "linux", "arm64", None, false, None).await;
    push_index(
        &reg,
        "shop/web",
        "1.0",
        false,
        &[
            (amd, platform("linux", "amd64", None), None),
            (arm, platform("linux", "arm64", None), None),
        ],
    )
    .await;
    push_image(
        &reg,
        "shop/legacy",
        "linux",
        "amd64",
        None,
        false,
        Some("1.0"),
    )
    .await;
    push_image(
        &reg,
        "shop/mainframe",
        "linux",
        "s390x",
        None,
        true,
        Some("1.0"),
    )
    .await;
    let settings = reg.dir().join("registries-audit.yaml");
    std::fs::write(
        &settings,
        format!(
            "{}  - registry: \"127.0.0.1:1\"\n    insecure: true\n",
            reg.settings_yaml()
        ),
    )
    .unwrap();
    let manifests = format!(
        "kind: Deployment\nmetadata: {{name: web}}\nspec: {{template: {{spec: {{containers: [{{name: web, image: '{addr}/shop/web:1.0'}}]}}}}}}\n---\n\
         kind: Deployment\nmetadata: {{name: legacy}}\nspec: {{template: {{spec: {{containers: [{{name: app, image: '{addr}/shop/legacy:1.0'}}]}}}}}}\n---\n\
         kind: Deployment\nmetadata: {{name: gone}}\nspec: {{template: {{spec: {{containers: [{{name: app, image: '127.0.0.1:1/shop/gone:1'}}]}}}}}}\n---\n\
         kind: Job\nmetadata: {{name: batch}}\nspec: {{template: {{spec: {{containers: [{{name: app, image: '{addr}/shop/mainframe:1.0'}}]}}}}}}\n",
        addr = reg.addr
    );
    let out = audit(
        &[
            "-f",
            "-",
            "--registries-config",
            settings.to_str().unwrap(),
            "--arch",
            "amd64,arm64",
            "--timeout",
            "5s",
            "-o",
            "json",
        ],
        Some(&manifests),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["workloads"][0]["verdict"], "runsOnAll");
    assert_eq!(
        report["workloads"][0]["images"][0]["platforms"],
        serde_json::json!(["amd64", "arm64"])
    );
    assert_eq!(report["workloads"][1]["verdict"], "restricted");
    assert_eq!(report["workloads"][2]["verdict"], "unknown");
    assert!(
        report["workloads"][2]["reason"]
            .as_str()
            .unwrap()
            .contains("registry 127.0.0.1:1 is unreachable"),
        "{}",
        report["workloads"][2]
    );
    // A Docker single manifest for s390x only: blocked on these targets.
    assert_eq!(report["workloads"][3]["verdict"], "blocked");
    assert_eq!(
        report["workloads"][3]["reason"],
        "the images run on s390x only, none of amd64, arm64"
    );
}

#[test]
fn the_demo_runs_offline_and_suggests_a_configuration() {
    let out = audit(&["--demo"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("6 workloads: 2 run on all of amd64, arm64, ppc64le, s390x, 3 restricted, 0 blocked, 1 unknown; 1 pinned against their images"), "{table}");
    assert!(
        table.contains("shop/Deployment/recommender  unknown"),
        "{table}"
    );
    assert!(
        table.contains(
            "Suggested ClusterPodPlacementConfig:\n---\napiVersion: multiarch.openshift.io/v1beta1"
        ),
        "{table}"
    );
    assert!(table.contains("  fallbackArchitecture: amd64"), "{table}");
    // The demo is its own input.
    let out = audit(&["--demo", "-f", "-"], Some(""));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The progress bar is drawn on a terminal (here a pseudo-terminal from `script`) and
/// never when standard error is a pipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_progress_bar_shows_on_a_terminal_only() {
    let silent = registry::silent_server().await;
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("registries.yaml");
    std::fs::write(
        &settings,
        format!("registries:\n  - registry: \"{silent}\"\n    insecure: true\n"),
    )
    .unwrap();
    let manifests = dir.path().join("app.yaml");
    std::fs::write(
        &manifests,
        format!("kind: Pod\nmetadata: {{name: p}}\nspec: {{containers: [{{name: c, image: '{silent}/slow/app:1'}}]}}\n"),
    )
    .unwrap();
    let args = [
        "audit",
        "-f",
        manifests.to_str().unwrap(),
        "--registries-config",
        settings.to_str().unwrap(),
        "--timeout",
        "1s",
    ];
    let binary = env!("CARGO_BIN_EXE_multiarch");
    let piped = {
        let args = args.map(String::from);
        tokio::task::spawn_blocking(move || Command::new(binary).args(args).output().unwrap())
            .await
            .unwrap()
    };
    assert!(piped.status.success());
    assert!(
        !String::from_utf8_lossy(&piped.stderr).contains("inspecting images"),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert!(String::from_utf8_lossy(&piped.stdout).contains("did not answer within"));
    let line = format!("{binary} {}", args.join(" "));
    let on_terminal = tokio::task::spawn_blocking(move || {
        Command::new("script")
            .args(["-q", "-e", "-c", &line, "/dev/null"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(on_terminal.status.success());
    let shown = String::from_utf8_lossy(&on_terminal.stdout);
    assert!(shown.contains("inspecting images"), "{shown}");
    assert!(shown.contains("0/1"), "{shown}");
}

/// `--binaries`: the builds' binaries read and judged by, as `binaryInspection` places.
#[tokio::test]
async fn binaries_raise_levels_and_leave_out_mislabelled_builds() {
    use registry::{TarEntry, gzip, layer_tar, push_image_with_layers};
    let reg = Registry::start(Options::default());
    let run = serde_json::json!({"Entrypoint": ["/server"]});
    let program = |elf: Vec<u8>| gzip(&layer_tar(&[TarEntry::File("server", &elf)]));
    let amd64 = multiarch_test_support::elf::x86_64(None, 0b0001);
    let v3 = multiarch_test_support::elf::x86_64(None, 0b0111);
    // RHEL 10's way: `amd64` in the index, x86-64-v3 in the binary.
    let rhel = push_image_with_layers(&reg, "rhel10", "amd64", run.clone(), &[program(v3)]).await;
    push_index(
        &reg,
        "rhel10",
        "1",
        false,
        &[(rhel, platform("linux", "amd64", None), None)],
    )
    .await;
    // An arm64 entry whose program is amd64.
    let real = push_image_with_layers(
        &reg,
        "talos",
        "amd64",
        run.clone(),
        &[program(amd64.clone())],
    )
    .await;
    let fake = push_image_with_layers(&reg, "talos", "arm64", run, &[program(amd64)]).await;
    push_index(
        &reg,
        "talos",
        "1",
        false,
        &[
            (real, platform("linux", "amd64", None), None),
            (fake, platform("linux", "arm64", None), None),
        ],
    )
    .await;
    let settings = reg.dir().join("registries-binaries.yaml");
    std::fs::write(&settings, reg.settings_yaml()).unwrap();
    let manifests = format!(
        "kind: Deployment\nmetadata: {{name: ubi}}\nspec: {{template: {{spec: {{containers: [{{name: app, image: '{addr}/rhel10:1'}}]}}}}}}\n---\n\
         kind: Deployment\nmetadata: {{name: talos}}\nspec: {{template: {{spec: {{containers: [{{name: app, image: '{addr}/talos:1'}}]}}}}}}\n",
        addr = reg.addr
    );
    let run_audit = |extra: &[&str]| {
        let mut args = vec![
            "-f",
            "-",
            "--registries-config",
            settings.to_str().unwrap(),
            "--arch",
            "amd64,arm64",
            "-o",
            "json",
        ];
        args.extend_from_slice(extra);
        let out = audit(&args, Some(&manifests));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };

    // Without --binaries, the index is believed.
    let believed = run_audit(&[]);
    assert_eq!(
        believed["workloads"][0]["images"][0]["platforms"],
        serde_json::json!(["amd64"])
    );
    assert_eq!(believed["workloads"][1]["verdict"], "runsOnAll");
    assert!(believed.get("mislabelledBuilds").is_none());

    let read = run_audit(&["--binaries"]);
    assert_eq!(
        read["workloads"][0]["images"][0]["platforms"],
        serde_json::json!(["amd64/v3"])
    );
    assert_eq!(read["workloads"][1]["verdict"], "restricted");
    assert_eq!(
        read["workloads"][1]["images"][0]["platforms"],
        serde_json::json!(["amd64"])
    );
    assert_eq!(
        read["mislabelledBuilds"],
        serde_json::json!([format!(
            "image {}/talos:1's arm64 build runs a program built for amd64 (/server): not counted as runnable",
            reg.addr
        )])
    );
}
