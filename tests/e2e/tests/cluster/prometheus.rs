//! A real Prometheus (Debian's `prometheus`) on this host, scraping every multiarch pod's
//! metrics endpoint directly (what a ServiceMonitor would give it) and evaluating the
//! checked-in alert rules (`manifests/monitoring/prometheus-rule.yaml`): the case "exec
//! format errors" starts it, checks that every metric the rules name is scraped, and
//! waits for `MultiarchExecFormatError` to fire on its real exec format error.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context, bail, ensure};
use multiarch_e2e::{tier::Tier, wait};
use serde_json::{Value, json};

const BINARY: &str = "prometheus";
const READY: Duration = Duration::from_secs(120);

pub struct Prometheus {
    child: Child,
    address: String,
    _dir: TempDir,
}

/// A directory removed when dropped (the e2e crate has no tempfile).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // Stopped by its pid, whatever the case's outcome.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether Prometheus can run here (scripts/test installs it: scripts/prerequisites).
pub fn available() -> bool {
    Command::new(BINARY)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The alert rules of the checked-in PrometheusRule: its `spec` is a rule file. The
/// generated YAML ends with `spec:`, its lines indented by two.
fn rule_file(tier: &Tier) -> anyhow::Result<String> {
    let path = tier.repo.join("manifests/monitoring/prometheus-rule.yaml");
    let yaml = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let spec = yaml
        .split_once("\nspec:\n")
        .with_context(|| format!("{} has no spec", path.display()))?
        .1;
    Ok(spec
        .lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// One scrape job per multiarch pod: its `metrics` port over HTTP, or the webhook's
/// HTTPS port (its certificate is the cluster CA's: not checked here).
fn scrape_configs(tier: &Tier) -> anyhow::Result<Vec<Value>> {
    let pods = tier.kubectl.items(&["pods", "-n", "multiarch"])?;
    let mut jobs = Vec::new();
    for pod in &pods {
        let (Some(name), Some(ip)) = (
            pod["metadata"]["name"].as_str(),
            pod["status"]["podIP"].as_str(),
        ) else {
            continue;
        };
        let component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
            .as_str()
            .unwrap_or("unknown");
        let ports: Vec<&Value> = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["ports"].as_array())
            .flatten()
            .collect();
        let port = |wanted: &str| {
            ports
                .iter()
                .find(|p| p["name"] == wanted)
                .and_then(|p| p["containerPort"].as_u64())
        };
        let (scheme, port) = match (port("metrics"), port("https")) {
            (Some(port), _) => ("http", port),
            (None, Some(port)) => ("https", port),
            (None, None) => continue,
        };
        jobs.push(json!({
            "job_name": format!("{name}"),
            "scheme": scheme,
            "tls_config": {"insecure_skip_verify": true},
            "static_configs": [{
                "targets": [format!("{ip}:{port}")],
                // As a ServiceMonitor's target would be labelled.
                "labels": {"job": format!("multiarch-{component}"), "namespace": "multiarch", "pod": name},
            }],
        }));
    }
    ensure!(!jobs.is_empty(), "no multiarch pod to scrape");
    Ok(jobs)
}

impl Prometheus {
    /// Started on a free loopback port, scraping and evaluating every 2 s.
    pub fn start(tier: &Tier) -> anyhow::Result<Prometheus> {
        let dir = TempDir(tier.work.join(format!("prometheus-{}", std::process::id())));
        let _ = std::fs::remove_dir_all(&dir.0);
        std::fs::create_dir_all(dir.0.join("data"))?;
        std::fs::write(dir.0.join("rules.yaml"), rule_file(tier)?)?;
        let config = json!({
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "rule_files": [dir.0.join("rules.yaml")],
            "scrape_configs": scrape_configs(tier)?,
        });
        std::fs::write(dir.0.join("prometheus.yml"), config.to_string())?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let address = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.0.join("prometheus.log"))?;
        let child = Command::new(BINARY)
            .arg(format!(
                "--config.file={}",
                dir.0.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.0.join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("cannot start prometheus")?;
        let prometheus = Prometheus {
            child,
            address,
            _dir: dir,
        };
        wait::until_true("Prometheus ready", READY, || {
            Ok((prometheus.get("/-/ready").is_ok(), prometheus.log_tail()))
        })?;
        Ok(prometheus)
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self._dir.0.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    fn get(&self, path: &str) -> anyhow::Result<String> {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "10"])
            .arg(format!("http://{}{path}", self.address))
            .output()?;
        if !out.status.success() {
            bail!("GET {path}: curl exit {:?}", out.status.code());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn api(&self, path: &str) -> anyhow::Result<Value> {
        let body: Value = serde_json::from_str(&self.get(path)?)?;
        ensure!(body["status"] == "success", "{path}: {body}");
        Ok(body["data"].clone())
    }

    /// Waits until every target is up.
    pub fn targets_up(&self, deadline: Duration) -> anyhow::Result<usize> {
        wait::until("every multiarch target scraped", deadline, || {
            let targets = self.api("/api/v1/targets")?;
            let active = targets["activeTargets"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let down: Vec<String> = active
                .iter()
                .filter(|t| t["health"] != "up")
                .map(|t| format!("{} {} {}", t["labels"]["pod"], t["health"], t["lastError"]))
                .collect();
            Ok(if !active.is_empty() && down.is_empty() {
                wait::Check::Done(active.len())
            } else {
                wait::Check::NotYet(format!("{} targets, not up: {down:?}", active.len()))
            })
        })
    }

    /// The metric names Prometheus holds.
    pub fn metric_names(&self) -> anyhow::Result<Vec<String>> {
        let names = self.api("/api/v1/label/__name__/values")?;
        Ok(names
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect())
    }

    /// The `multiarch_*` and `mto_*` names the loaded rules query.
    pub fn names_in_rules(&self) -> anyhow::Result<Vec<String>> {
        let rules = self.api("/api/v1/rules")?;
        let mut names = Vec::new();
        for group in rules["groups"].as_array().into_iter().flatten() {
            for rule in group["rules"].as_array().into_iter().flatten() {
                let query = rule["query"].as_str().unwrap_or_default();
                for word in query.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                    if (word.starts_with("multiarch_") || word.starts_with("mto_"))
                        && !names.iter().any(|n| n == word)
                    {
                        names.push(word.to_owned());
                    }
                }
            }
        }
        ensure!(names.len() >= 10, "the rules name only {names:?}");
        Ok(names)
    }

    /// Waits until `alert` fires; its labels.
    pub fn firing(&self, alert: &str, deadline: Duration) -> anyhow::Result<Value> {
        wait::until(&format!("the alert {alert} firing"), deadline, || {
            let alerts = self.api("/api/v1/alerts")?;
            let all = alerts["alerts"].as_array().cloned().unwrap_or_default();
            let found = all
                .iter()
                .find(|a| a["labels"]["alertname"] == alert && a["state"] == "firing");
            Ok(match found {
                Some(a) => wait::Check::Done(a["labels"].clone()),
                None => wait::Check::NotYet(format!(
                    "alerts: {:?}",
                    all.iter()
                        .map(|a| format!("{} {}", a["labels"]["alertname"], a["state"]))
                        .collect::<Vec<_>>()
                )),
            })
        })
    }
}
