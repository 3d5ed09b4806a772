//! A label selector checked as kube-apiserver checks one (apimachinery's
//! `ValidateLabelSelector`): operators, values for each operator, label keys as qualified
//! names and values as label values, with the API server's messages. The
//! ClusterPodPlacementConfig's `namespaceSelector` is copied into a webhook configuration,
//! which the API server would refuse: it is refused here first, when the user writes it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

const OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];
const QUALIFIED_NAME_MAX: usize = 63;
const PREFIX_MAX: usize = 253;
const LABEL_VALUE_MAX: usize = 63;

/// Every problem with `selector` at `path`, as `path: Kind: detail` (the API server's
/// field error form). Empty: valid.
pub fn selector_errors(selector: &LabelSelector, path: &str) -> Vec<String> {
    let mut errors = Vec::new();
    for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = requirement.values.as_deref().unwrap_or_default();
        match requirement.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errors.push(format!(
                "{at}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(format!(
                "{at}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errors.push(format!(
                "{at}.operator: Unsupported value: {other:?}: supported values: {}",
                OPERATORS.map(|o| format!("{o:?}")).join(", ")
            )),
        }
        errors.extend(qualified_name_errors(
            &requirement.key,
            &format!("{at}.key"),
        ));
        for (j, value) in values.iter().enumerate() {
            errors.extend(label_value_errors(value, &format!("{at}.values[{j}]")));
        }
    }
    for (key, value) in selector.match_labels.iter().flatten() {
        errors.extend(qualified_name_errors(key, &format!("{path}.matchLabels")));
        errors.extend(label_value_errors(value, &format!("{path}.matchLabels")));
    }
    errors
}

fn alphanumeric(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`
fn is_name_part(s: &str) -> bool {
    let (Some(first), Some(last)) = (s.chars().next(), s.chars().last()) else {
        return false;
    };
    alphanumeric(first)
        && alphanumeric(last)
        && s.chars()
            .all(|c| alphanumeric(c) || matches!(c, '-' | '_' | '.'))
}

/// A DNS-1123 subdomain: lowercase labels `[a-z0-9]([-a-z0-9]*[a-z0-9])?` joined by dots.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= PREFIX_MAX
        && s.split('.').all(|label| {
            let (Some(first), Some(last)) = (label.chars().next(), label.chars().last()) else {
                return false;
            };
            let lower = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            lower(first) && lower(last) && label.chars().all(|c| lower(c) || c == '-')
        })
}

fn qualified_name_errors(key: &str, at: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let mut problems = Vec::new();
    if name.is_empty() {
        problems.push("name part must be non-empty".to_owned());
    } else {
        if name.len() > QUALIFIED_NAME_MAX {
            problems.push(format!(
                "name part must be no more than {QUALIFIED_NAME_MAX} characters"
            ));
        }
        if !is_name_part(name) || name.contains('/') {
            problems.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_owned());
        }
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            problems.push("prefix part must be non-empty".to_owned());
        } else if !is_dns_subdomain(prefix) {
            problems.push("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_owned());
        }
    }
    problems
        .into_iter()
        .map(|p| format!("{at}: Invalid value: {key:?}: {p}"))
        .collect()
}

fn label_value_errors(value: &str, at: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        problems.push(format!("must be no more than {LABEL_VALUE_MAX} characters"));
    }
    if !value.is_empty() && !is_name_part(value) {
        problems.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_owned());
    }
    problems
        .into_iter()
        .map(|p| format!("{at}: Invalid value: {value:?}: {p}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errors(selector: serde_json::Value) -> Vec<String> {
        selector_errors(
            &serde_json::from_value(selector).unwrap_or_default(),
            "spec.namespaceSelector",
        )
    }

    #[test]
    fn valid_selectors_pass() {
        for selector in [
            json!({}),
            json!({"matchLabels": {"team": "payments", "example.com/tier": ""}}),
            json!({"matchExpressions": [
                {"key": "multiarch.openshift.io/exclude-pod-placement", "operator": "DoesNotExist"},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "a_b.c-1"]},
            ]}),
        ] {
            assert_eq!(errors(selector.clone()), [] as [String; 0], "{selector}");
        }
    }

    #[test]
    fn invalid_selectors_are_refused_with_the_api_server_s_messages() {
        let cases = [
            (
                json!({"matchExpressions": [{"key": "team", "operator": "In"}]}),
                "spec.namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
            ),
            (
                json!({"matchExpressions": [{"key": "team", "operator": "Exists", "values": ["a"]}]}),
                "spec.namespaceSelector.matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            (
                json!({"matchExpressions": [{"key": "team", "operator": "in", "values": ["a"]}]}),
                "spec.namespaceSelector.matchExpressions[0].operator: Unsupported value: \"in\": supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\"",
            ),
            (
                json!({"matchExpressions": [{"key": "Bad_Prefix/name", "operator": "Exists"}]}),
                "spec.namespaceSelector.matchExpressions[0].key: Invalid value: \"Bad_Prefix/name\": prefix part a lowercase RFC 1123 subdomain",
            ),
            (
                json!({"matchLabels": {"team": "-payments"}}),
                "spec.namespaceSelector.matchLabels: Invalid value: \"-payments\": a valid label must be an empty string",
            ),
            (
                json!({"matchLabels": {"": "x"}}),
                "spec.namespaceSelector.matchLabels: Invalid value: \"\": name part must be non-empty",
            ),
        ];
        for (selector, message) in cases {
            let found = errors(selector.clone());
            assert_eq!(found.len(), 1, "{selector}: {found:?}");
            assert!(found[0].starts_with(message), "{selector}: {found:?}");
        }
        let long = "a".repeat(64);
        let found = errors(json!({"matchLabels": {long.clone(): long}}));
        assert_eq!(found.len(), 2, "{found:?}");
    }
}
