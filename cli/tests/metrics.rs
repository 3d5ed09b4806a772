//! Every role's metrics, registered as the role registers them and read from their
//! exposition: `docs/reference/metrics.md` is generated from them (and lists every one),
//! and every `multiarch_*` / `mto_*` name an alert or a dashboard panel queries is among
//! them (a renamed metric would otherwise leave an alert that can never fire).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{collections::BTreeSet, path::Path};

use multiarch_admission::{
    gate::metrics::GateMetrics,
    webhook::metrics::{ReviewResultLabel, WebhookMetrics},
};
use multiarch_enoexec::{daemon::metrics::DaemonMetrics, handler::metrics::HandlerMetrics};
use multiarch_inspector::{
    metrics::{InspectionResultLabel, InspectorMetrics},
    settings_file::ReloadMetrics,
};
use multiarch_operator::{
    install::{ALERTS, PANELS},
    metrics::{ActionLabel, OperatorMetrics, ResultLabel, SecretLabel, StepLabel},
};
use multiarch_runtime::leader_metric::LeaderGauge;
use multiarch_scheduler::in_cluster::metrics::{
    AttemptResultLabel, DecidedByLabel, HintLabel, QueueLabel, SchedulerMetrics, TypeLabel,
};
use multiarch_test_support::generated::assert_generated;
use prometheus_client::{encoding::text::encode, registry::Registry};

/// Each role's registry, registered as the role registers it (`cli/src/commands/`),
/// every labelled family given one series (prometheus-client exposes a family only once
/// it has one) with placeholder label values.
fn roles() -> Vec<(&'static str, Registry)> {
    let scheduler = {
        let mut registry = Registry::default();
        let metrics = SchedulerMetrics::default();
        metrics.register(&mut registry);
        let _ = metrics
            .attempts
            .get_or_create(&AttemptResultLabel { result: "…" });
        let _ = metrics
            .pending_pods
            .get_or_create(&QueueLabel { queue: "…" });
        let _ = metrics.cache_size.get_or_create(&TypeLabel { r#type: "…" });
        let _ = metrics.queueing_hints.get_or_create(&HintLabel {
            event: "…",
            hint: "…",
        });
        let _ = metrics
            .architecture_rule_decisions
            .get_or_create(&DecidedByLabel { decided_by: "…" });
        leaders(&mut registry);
        registry
    };
    let inspector = {
        let mut registry = Registry::default();
        let metrics = InspectorMetrics::default();
        metrics.register(&mut registry);
        metrics.count_inspection("…", "…");
        let _ = metrics
            .credential_failures
            .get_or_create(&InspectionResultLabel { result: "…" });
        metrics.count_binary_read("…");
        let reloads = ReloadMetrics::default();
        reloads.register(&mut registry);
        let _ = reloads.get("…");
        registry
    };
    let webhook = {
        let mut registry = Registry::default();
        let metrics = WebhookMetrics::default();
        metrics.register(&mut registry);
        let _ = metrics
            .admission_affinity
            .get_or_create(&ReviewResultLabel { result: "…" });
        registry
    };
    let gate = {
        let mut registry = Registry::default();
        GateMetrics::default().register(&mut registry);
        leaders(&mut registry);
        registry
    };
    let operator = {
        let mut registry = Registry::default();
        let metrics = OperatorMetrics::default();
        metrics.register(&mut registry);
        let _ = metrics
            .reconciles
            .get_or_create(&ResultLabel { result: "…" });
        let _ = metrics.writes.get_or_create(&ActionLabel { action: "…" });
        let _ = metrics
            .pods_released
            .get_or_create(&ActionLabel { action: "…" });
        let _ = metrics
            .step_failures
            .get_or_create(&StepLabel { step: "…" });
        let _ = metrics
            .certificate_expiry
            .get_or_create(&SecretLabel { secret: "…" });
        leaders(&mut registry);
        registry
    };
    let daemon = {
        let mut registry = Registry::default();
        DaemonMetrics::default().register(&mut registry);
        registry
    };
    let handler = {
        let mut registry = Registry::default();
        let metrics = HandlerMetrics::default();
        metrics.register(&mut registry);
        let _ = metrics.get("…");
        leaders(&mut registry);
        registry
    };
    vec![
        ("scheduler", scheduler),
        ("inspector", inspector),
        ("webhook", webhook),
        ("gate-controller", gate),
        ("operator", operator),
        ("enoexec-daemon", daemon),
        ("enoexec-handler", handler),
    ]
}

/// Every role that competes for a Lease exports it (`cli/src/commands/role.rs`).
fn leaders(registry: &mut Registry) {
    let leaders = LeaderGauge::default();
    leaders.register(registry);
    leaders.set("…", true);
}

/// One metric family as its role exposes it.
struct Family {
    name: String,
    kind: String,
    help: String,
    labels: Vec<String>,
}

/// The families of `registry`'s exposition, in order.
fn families(registry: &Registry) -> Vec<Family> {
    let mut text = String::new();
    encode(&mut text, registry).unwrap();
    let mut out: Vec<Family> = Vec::new();
    let mut help = String::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map_or("", |(_, h)| h).to_owned();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            out.push(Family {
                name: name.to_owned(),
                kind: kind.to_owned(),
                help: help.clone(),
                labels: Vec::new(),
            });
        } else if let (Some(family), Some(open)) = (out.last_mut(), line.find('{')) {
            let close = line.rfind('}').unwrap();
            for pair in line[open + 1..close].split(',') {
                let label = pair.split('=').next().unwrap().to_owned();
                if label != "le" && !family.labels.contains(&label) {
                    family.labels.push(label);
                }
            }
        }
    }
    out
}

/// The sample names the roles expose (`_total`, `_bucket`, `_sum`, `_count` included).
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (_, registry) in roles() {
        for family in families(&registry) {
            let suffixes: &[&str] = match family.kind.as_str() {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                _ => &[""],
            };
            for suffix in suffixes {
                names.insert(format!("{}{suffix}", family.name));
            }
        }
    }
    names
}

/// `docs/reference/metrics.md`.
fn reference() -> String {
    let mut out = String::from(
        "<!-- generated by cli/tests/metrics.rs: MULTIARCH_BLESS=1 cargo test -p multiarch --test metrics -->\n\
         # Metrics of every role\n\n\
         What each role serves on `/metrics` (its `metrics` port; the webhook's also on its HTTPS\n\
         port, the operator's also on its webhook port). Counters end in `_total`, histograms\n\
         have `_bucket`, `_sum` and `_count`. The alerts that read them: [alerts.md](../alerts.md).\n",
    );
    for (role, registry) in roles() {
        out.push_str(&format!(
            "\n## `multiarch {role}`\n\n| Metric | Type | Labels | Meaning |\n|---|---|---|---|\n"
        ));
        for family in families(&registry) {
            let name = match family.kind.as_str() {
                "counter" => format!("{}_total", family.name),
                _ => family.name.clone(),
            };
            out.push_str(&format!(
                "| `{name}` | {} | {} | {} |\n",
                family.kind,
                family.labels.join(", "),
                family.help.replace('|', "\\|")
            ));
        }
    }
    out
}

/// The `multiarch_*` and `mto_*` metric names a PromQL expression uses.
fn named_in(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_name = (i == 0 || !is_name_byte(bytes[i - 1]))
            && (expr[i..].starts_with("multiarch_") || expr[i..].starts_with("mto_"));
        if starts_name {
            let end = expr[i..]
                .find(|c: char| !is_name_byte(c as u8))
                .map_or(expr.len(), |n| i + n);
            names.push(expr[i..end].to_owned());
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

#[test]
fn every_metric_an_alert_or_a_panel_queries_is_exported() {
    let exported = exported();
    assert!(exported.contains("multiarch_scheduler_schedule_attempts_total"));
    let queries = ALERTS.iter().map(|a| (a.name, a.expr)).chain(
        PANELS
            .iter()
            .flat_map(|p| p.queries.iter().map(move |(q, _)| (p.title, *q))),
    );
    let mut checked = 0;
    for (what, expr) in queries {
        let names = named_in(expr);
        assert!(
            !names.is_empty() || expr.contains("up{"),
            "{what} queries no multiarch metric: {expr}"
        );
        for name in names {
            assert!(
                exported.contains(&name),
                "{what} queries {name}, which no component exports"
            );
            checked += 1;
        }
    }
    assert!(checked >= ALERTS.len(), "only {checked} names checked");
}

#[test]
fn the_name_scanner_finds_names_and_only_names() {
    assert_eq!(
        named_in(
            r#"sum(rate(multiarch_webhook_reviews_total{result="error"}[5m])) / sum(mto_ppo_pods_gated)"#
        ),
        ["multiarch_webhook_reviews_total", "mto_ppo_pods_gated"]
    );
    assert!(named_in(r#"up{job=~"multiarch-.*"}"#).is_empty());
}

/// Every family a role registers is on the page: a family left without a series above
/// would be missing from the exposition, so the registries' own count of what was
/// registered is compared with what the page shows.
#[test]
fn the_metrics_page_lists_every_metric_of_every_role() {
    for (role, registry) in roles() {
        let registered = format!("{registry:?}").matches("Descriptor {").count();
        let shown = families(&registry).len();
        assert_eq!(
            shown, registered,
            "{role}: {registered} metrics registered, {shown} exposed: give the new labelled family a series in roles()"
        );
    }
    let generated = reference();
    assert!(
        generated.contains("`multiarch_scheduler_schedule_attempts_total` | counter | result |"),
        "{generated}"
    );
    assert_generated(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/reference/metrics.md"),
        &generated,
        "the roles' metrics",
        "cargo test -p multiarch --test metrics",
    );
}
