//! Every metric the alerts and the dashboard query is one a component exports: each
//! role's metrics registered as the role registers them, their names read from the
//! exposition, and every `multiarch_*` / `mto_*` name in every query found there. A
//! renamed metric would otherwise leave an alert that can never fire.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::collections::BTreeSet;

use multiarch_admission::{
    gate::metrics::GateMetrics,
    webhook::metrics::{ReviewResultLabel, WebhookMetrics},
};
use multiarch_enoexec::{
    daemon::metrics::DaemonMetrics,
    handler::{correction::metrics::ReasonLabel, metrics::HandlerMetrics},
};
use multiarch_inspector::{metrics::InspectorMetrics, settings_file::ReloadMetrics};
use multiarch_operator::{
    install::{ALERTS, PANELS},
    metrics::{OperatorMetrics, SecretLabel},
};
use multiarch_runtime::leader_election::LeaderGauge;
use multiarch_scheduler::in_cluster::metrics::{AttemptResultLabel, QueueLabel, SchedulerMetrics};
use prometheus_client::{encoding::text::encode, registry::Registry};

/// The sample names every role's registry exposes (`_total`, `_bucket`, `_sum`,
/// `_count` included), registered as the roles register them. A labelled family is
/// exposed once it has a series: each is given one, as its role would.
fn exported() -> BTreeSet<String> {
    let mut registry = Registry::default();
    let scheduler = SchedulerMetrics::default();
    scheduler.register(&mut registry);
    scheduler
        .attempts
        .get_or_create(&AttemptResultLabel {
            result: "scheduled",
        })
        .inc();
    scheduler
        .pending_pods
        .get_or_create(&QueueLabel { queue: "active" })
        .set(1);
    let inspector = InspectorMetrics::default();
    inspector.register(&mut registry);
    inspector.count_inspection("quay.io", "ok");
    ReloadMetrics::default().register(&mut registry);
    let webhook = WebhookMetrics::default();
    webhook.register(&mut registry);
    webhook
        .reviews
        .get_or_create(&ReviewResultLabel { result: "routed" })
        .inc();
    GateMetrics::default().register(&mut registry);
    let operator = OperatorMetrics::default();
    operator.register(&mut registry);
    operator
        .certificate_expiry
        .get_or_create(&SecretLabel { secret: "tls" })
        .set(1);
    let daemon = DaemonMetrics::default();
    daemon.register(&mut registry);
    daemon.count("reported");
    let handler = HandlerMetrics::default();
    handler.register(&mut registry);
    handler
        .correction
        .not_corrected
        .get_or_create(&ReasonLabel { reason: "bare_pod" })
        .inc();
    let leaders = LeaderGauge::default();
    leaders.register(&mut registry);
    leaders.set("multiarch-scheduler", true);
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        // `# TYPE name kind`: families without a series yet still declare themselves.
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for suffix in suffixes {
            names.insert(format!("{name}{suffix}"));
        }
    }
    names
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
