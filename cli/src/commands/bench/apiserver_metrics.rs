//! The API server's own count of requests (`apiserver_request_total` on `/metrics`), read
//! before and after a run: what the scheduler asked for, per pod, by verb and resource.

use std::collections::BTreeMap;

/// Requests by `"VERB resource[/subresource]"`.
pub type RequestCounts = BTreeMap<String, f64>;

fn label<'a>(labels: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    labels
        .split(',')
        .find_map(|pair| pair.trim().strip_prefix(&key))
        .and_then(|rest| rest.strip_suffix('"'))
        .unwrap_or("")
}

/// `apiserver_request_total` of a Prometheus text exposition, summed over codes.
pub fn parse(text: &str) -> RequestCounts {
    let mut counts = RequestCounts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let resource = label(labels, "resource");
        // Non-resource requests (`/metrics`, `/healthz`) are not the placer's work.
        if resource.is_empty() {
            continue;
        }
        let subresource = label(labels, "subresource");
        let key = if subresource.is_empty() {
            format!("{} {resource}", label(labels, "verb"))
        } else {
            format!("{} {resource}/{subresource}", label(labels, "verb"))
        };
        *counts.entry(key).or_default() += value;
    }
    counts
}

/// What `after` counted beyond `before`, less `own` (the benchmark's own requests).
pub fn delta(before: &RequestCounts, after: &RequestCounts, own: &RequestCounts) -> RequestCounts {
    after
        .iter()
        .filter_map(|(key, value)| {
            let d = value
                - before.get(key).copied().unwrap_or(0.0)
                - own.get(key).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (key.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 10
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 2
"#;
    const AFTER: &str = r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 110
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 100
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="",verb="GET",version=""} 7
apiserver_request_duration_seconds_bucket{le="0.1"} 5
"#;

    #[test]
    fn counts_are_summed_over_codes_and_the_benchmark_s_own_are_taken_out() {
        let own = RequestCounts::from([("POST pods".to_owned(), 100.0)]);
        let d = delta(&parse(BEFORE), &parse(AFTER), &own);
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            [
                ("POST events".to_owned(), 100.0),
                ("POST pods/binding".to_owned(), 103.0)
            ]
        );
    }
}
