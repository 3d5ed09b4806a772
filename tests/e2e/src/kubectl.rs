//! kubectl as the tier's hands: every call bounded by a deadline (the process is killed
//! past it), its output returned or its stderr in the error.

use std::{
    io::{Read, Write},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};
use serde_json::Value;

/// How long one kubectl call may take, unless the call says otherwise.
pub const CALL_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct Kubectl {
    pub bin: PathBuf,
    pub kubeconfig: PathBuf,
}

/// What a finished process printed.
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.bin);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--request-timeout=30s")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    /// Starts `kubectl ARGS` in the background (a watch); its stdout is piped, the caller
    /// reads it and stops the process by its pid.
    pub fn spawn(&self, args: &[&str]) -> anyhow::Result<Child> {
        let mut command = Command::new(&self.bin);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        command
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.display()))
    }

    /// Runs `kubectl ARGS` with `stdin`, whatever its exit status.
    pub fn output(&self, args: &[&str], stdin: &str, deadline: Duration) -> anyhow::Result<Output> {
        let child = self
            .command(args)
            .spawn()
            .with_context(|| format!("cannot run {}", self.bin.display()))?;
        finish(child, stdin, deadline).with_context(|| format!("kubectl {}", args.join(" ")))
    }

    /// Runs `kubectl ARGS`; its stdout, or an error with its stderr.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        self.run_with(args, "", CALL_DEADLINE)
    }

    pub fn run_with(
        &self,
        args: &[&str],
        stdin: &str,
        deadline: Duration,
    ) -> anyhow::Result<String> {
        let out = self.output(args, stdin, deadline)?;
        if !out.success {
            bail!("kubectl {} failed: {}", args.join(" "), out.stderr.trim());
        }
        Ok(out.stdout)
    }

    /// `kubectl ARGS -o json`, parsed.
    pub fn json(&self, args: &[&str]) -> anyhow::Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.run(&all)?;
        serde_json::from_str(&text).with_context(|| format!("kubectl {}: not JSON", args.join(" ")))
    }

    /// `kubectl get ARGS -o json` of one object, `None` when it does not exist; any
    /// other failure is an error, never read as absence.
    pub fn get_opt(&self, args: &[&str]) -> anyhow::Result<Option<Value>> {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["--ignore-not-found", "-o", "json"]);
        let text = self.run(&all)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("kubectl get {}: not JSON", args.join(" ")))
    }

    /// `kubectl apply -f -` of `manifest` (YAML or JSON).
    pub fn apply(&self, manifest: &str) -> anyhow::Result<String> {
        self.run_with(&["apply", "-f", "-"], manifest, CALL_DEADLINE)
    }

    /// The items of `kubectl get ARGS -o json`.
    pub fn items(&self, args: &[&str]) -> anyhow::Result<Vec<Value>> {
        let mut all = vec!["get"];
        all.extend(args);
        let list = self.json(&all)?;
        Ok(list["items"].as_array().cloned().unwrap_or_default())
    }
}

/// Feeds `stdin`, reads both pipes while the process runs (a full pipe would stall it),
/// and kills it past `deadline`.
pub fn finish(mut child: Child, stdin: &str, deadline: Duration) -> anyhow::Result<Output> {
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin.as_bytes())?;
    }
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("killed after {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Output {
        success: status.success(),
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}
