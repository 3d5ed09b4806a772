//! Does a set of RBAC rules grant every request a component made to the fake API server?
//! Ties the generated manifests to what the code really calls.

use serde_json::Value;

/// `(api group, resource or resource/subresource, name)` of a logged request path.
fn target(path: &str) -> Option<(String, String, Option<String>)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => ((*group).to_owned(), rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _ns, rest @ ..] if !rest.is_empty() => rest,
        other => other,
    };
    match rest {
        [resource] => Some((group, (*resource).to_owned(), None)),
        [resource, name] => Some((group, (*resource).to_owned(), Some((*name).to_owned()))),
        [resource, name, sub] => {
            Some((group, format!("{resource}/{sub}"), Some((*name).to_owned())))
        }
        _ => None,
    }
}

/// `/api`, `/api/v1`, `/apis`, `/apis/GROUP`, `/apis/GROUP/VERSION`: what the API
/// serves, not an object.
fn is_discovery(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    matches!(
        parts.as_slice(),
        ["api"] | ["api", _] | ["apis"] | ["apis", _] | ["apis", _, _]
    )
}

fn grants(rules: &[Value], group: &str, resource: &str, name: Option<&str>, verb: &str) -> bool {
    let has = |rule: &Value, key: &str, value: &str| {
        rule[key]
            .as_array()
            .is_some_and(|list| list.iter().any(|v| v == value || v == "*"))
    };
    rules.iter().any(|rule| {
        has(rule, "apiGroups", group)
            && has(rule, "resources", resource)
            && has(rule, "verbs", verb)
            && match rule["resourceNames"].as_array() {
                None => true,
                Some(names) => name.is_some_and(|n| names.iter().any(|v| v == n)),
            }
    })
}

/// Panics naming the first request (`"METHOD /path"`) the rules do not grant.
pub fn assert_granted(rules: &[Value], requests: &[String]) {
    check(rules, requests, &["list", "watch"]);
}

/// [`assert_granted`] for a client that lists and never watches (a one-shot command):
/// a collection GET needs `list` only.
pub fn assert_granted_without_watches(rules: &[Value], requests: &[String]) {
    check(rules, requests, &["list"]);
}

/// [`assert_granted`] from the requests as logged with their query
/// (`FakeApiServer::requests_with_query`): a collection GET needs `watch` when it is a
/// watch and `list` when it is not, nothing more.
pub fn assert_granted_with_queries(rules: &[Value], requests: &[String]) {
    assert!(!requests.is_empty(), "no requests to check");
    for request in requests {
        let (method, uri) = request.split_once(' ').unwrap();
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let watch = query.split('&').any(|p| p == "watch=true");
        let verb = if watch { "watch" } else { "list" };
        check(rules, &[format!("{method} {path}")], &[verb]);
    }
}

fn check(rules: &[Value], requests: &[String], collection_verbs: &[&str]) {
    assert!(!requests.is_empty(), "no requests to check");
    for request in requests {
        let (method, path) = request.split_once(' ').unwrap();
        // A metadata-only read is recorded as such; it needs the same verbs.
        let path = path.trim_end_matches(" (metadata)");
        if method == "GET" && is_discovery(path) {
            // Every authenticated client may read discovery (system:discovery).
            continue;
        }
        let (group, resource, name) =
            target(path).unwrap_or_else(|| panic!("unparsed request {request}"));
        let verbs: &[&str] = match (method, &name) {
            ("GET", Some(_)) => &["get"],
            // A watcher lists, then watches; the log does not keep the query.
            ("GET", None) => collection_verbs,
            ("POST", _) => &["create"],
            ("PUT", _) => &["update"],
            ("PATCH", _) => &["patch"],
            ("DELETE", _) => &["delete"],
            _ => panic!("unexpected method in {request}"),
        };
        for verb in verbs {
            assert!(
                grants(rules, &group, &resource, name.as_deref(), verb),
                "RBAC does not grant {verb} on {group}/{resource} ({request})"
            );
        }
    }
}

/// The rules of a generated Role/ClusterRole list, flattened.
pub fn rules(lists: &[Value]) -> Vec<Value> {
    lists
        .iter()
        .flat_map(|list| list.as_array().cloned().unwrap_or_default())
        .collect()
}
