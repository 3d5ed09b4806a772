//! The constraint written for each kind of pod, as a table.

use serde_json::{Value, json};

use super::*;

fn pod(spec: Value) -> Pod {
    let mut base = json!({"containers": [{"name": "c", "image": "i"}]});
    for (k, v) in spec.as_object().unwrap() {
        base[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": base})).unwrap()
}

fn terms(pod: &Pod) -> Value {
    serde_json::to_value(pod).unwrap()["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .clone()
}

fn arch_term(values: &[&str]) -> Value {
    json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": values}]}]})
}

const NO_ARCH: &str = "multiarch.openshift.io/no-supported-arch";

#[test]
fn constraint_table() {
    let linux = |a: &str| Platform::linux(a);
    let cases: Vec<(&str, Value, Vec<Platform>, Constrained, Value)> = vec![
        (
            "no constraint: architectures and OS",
            json!({}),
            vec![linux("arm64"), linux("amd64")],
            Constrained::Architectures(vec!["amd64".into(), "arm64".into()]),
            json!([{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]},
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]),
        ),
        (
            "no platform in common",
            json!({}),
            vec![],
            Constrained::NoSupportedArch,
            json!([{"matchExpressions": [{"key": NO_ARCH, "operator": "Exists"}]}]),
        ),
        (
            "user terms get the requirement ANDed in each",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}}),
            vec![linux("arm64")],
            Constrained::Architectures(vec!["arm64".into()]),
            json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]},
                    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]),
        ),
        (
            "a compatible nodeSelector pin is the user's",
            json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
            vec![linux("arm64"), linux("amd64")],
            Constrained::UserPinned,
            Value::Null,
        ),
        (
            "a nodeSelector pin no build runs on",
            json!({"nodeSelector": {"kubernetes.io/arch": "amd64"}}),
            vec![linux("arm64")],
            Constrained::PinContradicted,
            json!([{"matchExpressions": [{"key": NO_ARCH, "operator": "Exists"}]}]),
        ),
        (
            "an affinity pin no build runs on",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                arch_term(&["s390x", "ppc64le"])}}}),
            vec![linux("arm64"), linux("amd64")],
            Constrained::PinContradicted,
            json!([{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x", "ppc64le"]},
                {"key": NO_ARCH, "operator": "Exists"}]}]),
        ),
        (
            "an affinity pin with one usable architecture",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                arch_term(&["s390x", "arm64"])}}}),
            vec![linux("arm64")],
            Constrained::UserPinned,
            arch_term(&["s390x", "arm64"])["nodeSelectorTerms"].clone(),
        ),
        (
            "NotIn is not read as a pin: left to the user",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}]}]}}}}),
            vec![linux("arm64")],
            Constrained::UserPinned,
            json!([{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["arm64"]}]}]),
        ),
    ];
    for (name, spec, platforms, outcome, expected_terms) in cases {
        let mut pod = pod(spec);
        assert_eq!(
            constrain(&mut pod, &platforms, UnknownNodeLevel::AnyLevel),
            outcome,
            "{name}"
        );
        assert_eq!(terms(&pod), expected_terms, "{name}");
    }
}

#[test]
fn pins_are_read_from_the_selector_and_every_term() {
    let both = pod(json!({"nodeSelector": {"kubernetes.io/arch": "arm64"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
            arch_term(&["arm64", "amd64"])}}}));
    assert_eq!(pinned_architectures(&both), Some(vec!["arm64".to_owned()]));
    let ored = pod(
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}}),
    );
    assert_eq!(
        pinned_architectures(&ored),
        Some(vec!["amd64".to_owned(), "s390x".to_owned()])
    );
    assert_eq!(pinned_architectures(&pod(json!({}))), None);
}

#[test]
fn a_rule_replaces_the_pods_own_architecture_constraint() {
    let cases: Vec<(&str, Value, bool, Value, Value)> = vec![
        (
            "no constraint: the rule's set",
            json!({}),
            false,
            Value::Null,
            json!([{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]),
        ),
        (
            "nodeSelector pin removed, other keys kept",
            json!({"nodeSelector": {"kubernetes.io/arch": "s390x", "disk": "ssd"}}),
            true,
            json!({"disk": "ssd"}),
            json!([{"matchExpressions": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]),
        ),
        (
            "arch expressions removed from every term, the rest kept",
            json!({"affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]},
                        {"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["amd64"]}]},
                    {"matchExpressions": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference":
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["s390x"]}]}}]}}}),
            true,
            Value::Null,
            json!([
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]},
                {"matchExpressions": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}]),
        ),
    ];
    for (name, spec, removed, selector, want) in cases {
        let mut p = pod(spec);
        let before = serde_json::to_value(&p).unwrap();
        assert_eq!(
            impose_rule(&mut p, &["arm64".into(), "amd64".into()]),
            removed,
            "{name}"
        );
        assert_eq!(terms(&p), want, "{name}");
        let after = serde_json::to_value(&p).unwrap();
        assert_eq!(after["spec"]["nodeSelector"], selector, "{name}");
        // Preferred terms are the user's and stay as they were.
        assert_eq!(
            after["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"],
            before["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"],
            "{name}"
        );
    }
}
