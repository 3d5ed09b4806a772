//! The case "architecture rules": `celArchitecturePlacement` on the real API server and
//! kubelet. A rule that reads the pod's spec is refused when written (the operator's
//! validating webhook, called by the API server); a rule naming the node's architecture
//! places its pod there and it runs; a rule naming an architecture no node has leaves its
//! pod Pending, the reason naming the rule.

use std::time::Duration;

use anyhow::{bail, ensure};
use multiarch_e2e::{
    pods::{self, required_architectures, wait_all_running, wait_event},
    tier::Tier,
    wait::{self, Check},
};
use serde_json::{Value, json};

pub const NS_RULES: &str = "e2e-rules";
const CONFIG: &str = "tiers";
const WAIT: Duration = Duration::from_secs(240);

fn config(rules: Value) -> Value {
    json!({
        "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
        "metadata": {"name": CONFIG, "namespace": NS_RULES},
        "spec": {"priority": 1, "plugins": {"celArchitecturePlacement": {
            "enabled": true, "fallbackArchitectures": ["amd64", "arm64"], "rules": rules}}},
    })
}

fn rule(name: &str, expression: &str, architecture: &str) -> Value {
    json!({"name": name, "expression": expression, "architectures": [architecture]})
}

/// A sleeper of the multi-architecture image, labelled `tier`.
fn ruled_pod(tier: &Tier, name: &str, tier_label: &str) -> Value {
    let mut pod = pods::sleeper(NS_RULES, name, &tier.test_images.multi());
    pod["metadata"]["labels"] = json!({"e2e": "ruled", "tier": tier_label});
    pod
}

fn rule_of(pod: &Value) -> &str {
    pod["metadata"]["annotations"]["multiarch.openshift.io/architecture-rule"]
        .as_str()
        .unwrap_or_default()
}

/// A rule reading the pod's spec is refused; rules sending `tier: native` pods to
/// `native` and `tier: foreign` ones to `foreign` are admitted.
fn configure_rules(tier: &Tier, native: &str, foreign: &str) -> anyhow::Result<()> {
    let reads_spec = config(json!([rule("spec", "self.spec.nodeName == ''", native)]));
    match tier.kubectl.apply(&reads_spec.to_string()) {
        Ok(_) => bail!("a rule reading the pod's spec was accepted"),
        Err(e) => ensure!(
            format!("{e:#}").contains("a rule may read only self.metadata.name"),
            "refused for another reason: {e:#}"
        ),
    }
    let rules = json!([
        rule(
            "native",
            "'tier' in self.metadata.labels && self.metadata.labels['tier'] == 'native'",
            native
        ),
        rule(
            "foreign",
            "'tier' in self.metadata.labels && self.metadata.labels['tier'] == 'foreign'",
            foreign
        ),
    ]);
    tier.kubectl.apply(&config(rules).to_string())?;
    Ok(())
}

pub fn architecture_rules(tier: &Tier) -> anyhow::Result<()> {
    tier.namespace(NS_RULES, json!({}))?;
    let foreign = tier.foreign_architecture()?;
    let native = if foreign == "amd64" { "arm64" } else { "amd64" };

    configure_rules(tier, native, &foreign)?;

    // The webhook and the scheduler follow configs through watches: a pod created before
    // both have this one is placed by its image. Each attempt is a new pod, until one is
    // admitted with the rule and left Pending by it.
    let phrase = format!("rule \"foreign\" of PodPlacementConfig {CONFIG} ({foreign})");
    let mut attempt = 0;
    let message = wait::until("a pod the foreign rule leaves Pending", WAIT, || {
        attempt += 1;
        let name = format!("ruled-foreign-{attempt}");
        tier.kubectl
            .apply(&ruled_pod(tier, &name, "foreign").to_string())?;
        let outcome = wait::until(&format!("{name} placed or refused"), WAIT, || {
            let pod = pods::get(&tier.kubectl, NS_RULES, &name)?;
            if !pod["spec"]["nodeName"].is_null() {
                return Ok(Check::Done(Err(format!(
                    "bound to {}",
                    pod["spec"]["nodeName"]
                ))));
            }
            let events = pods::events(&tier.kubectl, NS_RULES, &name)?;
            Ok(
                match events.iter().find(|(r, _, _)| r == "FailedScheduling") {
                    Some((_, _, message)) => Check::Done(Ok((pod.clone(), message.clone()))),
                    None => Check::NotYet(format!("events so far: {events:?}")),
                },
            )
        })?;
        let why = match outcome {
            Ok((pod, message))
                if message.contains(&phrase)
                    && rule_of(&pod) == format!("PodPlacementConfig-{CONFIG}/foreign") =>
            {
                ensure!(
                    pods::phase(&pod) == "Pending",
                    "{name}: {}",
                    pods::phase(&pod)
                );
                return Ok(Check::Done(message));
            }
            Ok((pod, message)) => format!(
                "{name}: FailedScheduling {message:?}, annotation {:?}",
                rule_of(&pod)
            ),
            Err(bound) => format!("{name}: {bound}"),
        };
        tier.kubectl.run(&[
            "delete",
            "pod",
            "-n",
            NS_RULES,
            &name,
            "--wait=true",
            "--timeout=60s",
        ])?;
        Ok(Check::NotYet(why))
    })?;
    ensure!(
        message.contains("didn't match the architectures of"),
        "FailedScheduling says {message:?}"
    );

    // The node's architecture: placed there by the rule, and running.
    tier.kubectl
        .apply(&ruled_pod(tier, "ruled-native", "native").to_string())?;
    let running = wait_all_running(&tier.kubectl, NS_RULES, "tier=native", 1, WAIT)?;
    let pod = &running[0];
    ensure!(
        rule_of(pod) == format!("PodPlacementConfig-{CONFIG}/native"),
        "ruled-native: annotation {:?}",
        rule_of(pod)
    );
    ensure!(
        required_architectures(pod) == [native],
        "ruled-native: the rule's constraint: {}",
        pod["spec"]["affinity"]
    );
    let (from, scheduled) = wait_event(&tier.kubectl, NS_RULES, "ruled-native", "Scheduled", WAIT)?;
    ensure!(
        from == "multiarch-scheduler"
            && scheduled.contains(&format!(
                "architectures {native} from rule \"native\" of PodPlacementConfig {CONFIG}"
            )),
        "Scheduled by {from}: {scheduled:?}"
    );

    // Nothing can place the pending pod: it must not hold the uninstall's drain.
    tier.kubectl.run(&[
        "delete",
        "namespace",
        NS_RULES,
        "--wait=true",
        "--timeout=120s",
    ])?;
    Ok(())
}
