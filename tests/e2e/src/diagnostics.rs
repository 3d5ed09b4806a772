//! What the tier prints when a case fails: enough to see why without the cluster, which
//! is gone by the time anyone reads the log.

use crate::kubectl::{CALL_DEADLINE, Kubectl};

/// Prints the pods, recent events and the components' last log lines.
pub fn dump(kubectl: &Kubectl, namespaces: &[&str]) {
    let show = |title: &str, args: &[&str]| {
        println!("---- {title}: kubectl {}", args.join(" "));
        match kubectl.output(args, "", CALL_DEADLINE) {
            Ok(out) => {
                print!("{}", out.stdout);
                if !out.stderr.trim().is_empty() {
                    println!("(stderr) {}", out.stderr.trim());
                }
            }
            Err(e) => println!("(failed) {e:#}"),
        }
    };
    show("pods", &["get", "pods", "-A", "-o", "wide"]);
    show(
        "configuration",
        &["get", "clusterpodplacementconfigs", "-o", "yaml"],
    );
    for namespace in namespaces {
        show(
            "events",
            &["get", "events", "-n", namespace, "--sort-by=.lastTimestamp"],
        );
    }
    for component in [
        "operator",
        "scheduler",
        "webhook",
        "inspector",
        "gate-controller",
        "enoexec-daemon",
        "enoexec-handler",
    ] {
        let selector =
            format!("app.kubernetes.io/name=multiarch,app.kubernetes.io/component={component}");
        show(
            component,
            &[
                "logs",
                "-n",
                "multiarch",
                "-l",
                &selector,
                "--tail=40",
                "--prefix",
                "--all-containers",
            ],
        );
    }
}
