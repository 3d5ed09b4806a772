//! multiarch's Grafana dashboard, as code: one panel per alert's signal, plus the
//! scheduler's rate, latency and queues. `manifests/monitoring/dashboard.yaml` carries it
//! as a ConfigMap labelled for Grafana's dashboard sidecar (`grafana_dashboard: "1"`);
//! a test holds every query to the metrics the components export.

use serde_json::{Value, json};

use super::{Settings, labels};

/// The ConfigMap's name and its dashboard's file name.
pub const DASHBOARD: &str = "multiarch-dashboard";
const DASHBOARD_FILE: &str = "multiarch.json";
/// The dashboard's stable uid (links and provisioning keep it across versions).
const UID: &str = "multiarch-overview";

/// One panel: its title, Grafana's unit, and its queries as `(PromQL, legend)`.
pub struct Panel {
    pub title: &'static str,
    pub unit: &'static str,
    pub queries: &'static [(&'static str, &'static str)],
}

/// Every panel, in order.
pub const PANELS: &[Panel] = &[
    Panel {
        title: "Scheduling attempts by result",
        unit: "ops",
        queries: &[(
            "sum by (result) (rate(multiarch_scheduler_schedule_attempts_total[5m]))",
            "{{result}}",
        )],
    },
    Panel {
        title: "Scheduling attempt latency",
        unit: "s",
        queries: &[
            (
                "histogram_quantile(0.5, sum by (le) (rate(multiarch_scheduler_scheduling_attempt_duration_seconds_bucket[5m])))",
                "p50",
            ),
            (
                "histogram_quantile(0.99, sum by (le) (rate(multiarch_scheduler_scheduling_attempt_duration_seconds_bucket[5m])))",
                "p99",
            ),
        ],
    },
    Panel {
        title: "Pods waiting in multiarch-scheduler, by queue",
        unit: "short",
        queries: &[(
            "sum by (queue) (multiarch_scheduler_pending_pods)",
            "{{queue}}",
        )],
    },
    Panel {
        title: "Exec format errors reported, by daemon pod",
        unit: "short",
        queries: &[(
            "sum by (pod) (increase(multiarch_enoexec_daemon_events_total{outcome=\"reported\"}[10m]))",
            "{{pod}}",
        )],
    },
    Panel {
        title: "Misplaced pods not moved, by reason",
        unit: "short",
        queries: &[(
            "sum by (reason) (increase(multiarch_misplaced_pods_not_corrected_total[1h]))",
            "{{reason}}",
        )],
    },
    Panel {
        title: "Gated pods and releases",
        unit: "short",
        queries: &[
            ("max(mto_ppo_pods_gated)", "gated"),
            (
                "sum(increase(mto_ppo_ctrl_processed_pods_total[10m]))",
                "released in 10m",
            ),
        ],
    },
    Panel {
        title: "Time to release a gated pod (p99)",
        unit: "s",
        queries: &[(
            "histogram_quantile(0.99, sum by (le) (rate(mto_ppo_ctrl_time_to_process_gated_pod_seconds_bucket[10m])))",
            "p99",
        )],
    },
    Panel {
        title: "Webhook reviews by result",
        unit: "ops",
        queries: &[(
            "sum by (result) (rate(multiarch_webhook_reviews_total[5m]))",
            "{{result}}",
        )],
    },
    Panel {
        title: "Webhook review latency (p99; the API server gives up at 5 s)",
        unit: "s",
        queries: &[(
            "histogram_quantile(0.99, sum by (le) (rate(multiarch_webhook_review_duration_seconds_bucket[5m])))",
            "p99",
        )],
    },
    Panel {
        title: "Inspections failing at the registry, by registry",
        unit: "percentunit",
        queries: &[(
            "sum by (registry) (rate(multiarch_inspector_registry_inspections_total{result=~\"unreachable|timeout|server_error|tls|busy|refused\"}[10m])) / sum by (registry) (rate(multiarch_inspector_registry_inspections_total[10m]))",
            "{{registry}}",
        )],
    },
    Panel {
        title: "Leaders by Lease",
        unit: "short",
        queries: &[("sum by (lease) (multiarch_leader)", "{{lease}}")],
    },
    Panel {
        title: "Days until each certificate expires",
        unit: "d",
        queries: &[(
            "(min by (secret) (multiarch_operator_certificate_expiry_seconds) - time()) / 86400",
            "{{secret}}",
        )],
    },
    Panel {
        title: "Components scraped",
        unit: "short",
        queries: &[("up{job=~\"multiarch-.*\"}", "{{job}} {{instance}}")],
    },
];

/// The dashboard's JSON model.
pub fn dashboard() -> Value {
    let panels: Vec<Value> = PANELS
        .iter()
        .enumerate()
        .map(|(i, panel)| {
            let Panel {
                title,
                unit,
                queries,
            } = panel;
            let targets: Vec<Value> = queries
                .iter()
                .zip('A'..)
                .map(|((expr, legend), ref_id)| {
                    json!({
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        "expr": expr, "legendFormat": legend, "refId": ref_id.to_string(),
                    })
                })
                .collect();
            // Two panels a row, 12 of Grafana's 24 columns each.
            let (x, y) = ((i % 2) * 12, (i / 2) * 8);
            json!({
                "id": i + 1, "type": "timeseries", "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": targets,
            })
        })
        .collect();
    json!({
        "uid": UID, "title": "multiarch", "tags": ["multiarch"],
        "schemaVersion": 39, "editable": true, "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{
            "name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus",
        }]},
        "panels": panels,
    })
}

/// The ConfigMap Grafana's dashboard sidecar loads (`grafana_dashboard: "1"`).
pub fn dashboard_config_map(settings: &Settings) -> Value {
    let mut metadata_labels = labels("dashboard");
    metadata_labels["grafana_dashboard"] = json!("1");
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": DASHBOARD, "namespace": settings.namespace, "labels": metadata_labels},
        // `{:#}`: the Value's pretty JSON (its Display cannot fail).
        "data": {DASHBOARD_FILE: format!("{:#}", dashboard())},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panels_do_not_overlap_and_each_has_a_query() {
        let model = dashboard();
        let panels = model["panels"].as_array().unwrap();
        assert_eq!(panels.len(), PANELS.len());
        let mut places: Vec<(u64, u64)> = panels
            .iter()
            .map(|p| {
                assert!(!p["targets"].as_array().unwrap().is_empty());
                (
                    p["gridPos"]["x"].as_u64().unwrap(),
                    p["gridPos"]["y"].as_u64().unwrap(),
                )
            })
            .collect();
        places.sort_unstable();
        places.dedup();
        assert_eq!(places.len(), panels.len(), "two panels in one place");
    }
}
