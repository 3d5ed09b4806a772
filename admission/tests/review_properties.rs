//! Property tests for AdmissionReview bodies: whatever the API server (or anyone who can
//! reach the webhook's port) sends, the webhook answers or refuses without panicking, and
//! every patch it returns applies to the pod it was computed for, however odd that pod's
//! fields are.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use base64::Engine;
use multiarch_admission::webhook::{decision::WebhookConfig, review::review};
use multiarch_crd::PlacementMode;
use proptest::prelude::*;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/admission")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Small JSON values of every type.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        Just(json!("multiarch.openshift.io/scheduling-gate")),
        Just(json!("multiarch-scheduler")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-zA-Z./-]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        ".{0,16}",
        Just(String::new()),
        Just("multiarch-scheduler".to_owned()),
        Just("multiarch.openshift.io/scheduling-gate".to_owned()),
        Just("kubernetes.io/arch".to_owned()),
    ]
    .boxed()
}

fn string_map() -> BoxedStrategy<Value> {
    proptest::collection::btree_map(text(), text(), 0..4)
        .prop_map(|m| json!(m))
        .boxed()
}

fn requirement() -> BoxedStrategy<Value> {
    (
        text(),
        prop_oneof![
            Just("In"),
            Just("NotIn"),
            Just("Exists"),
            Just("DoesNotExist"),
            Just("Gt"),
            Just("Bogus")
        ],
        proptest::collection::vec(text(), 0..3),
    )
        .prop_map(
            |(key, operator, values)| json!({"key": key, "operator": operator, "values": values}),
        )
        .boxed()
}

fn affinity() -> BoxedStrategy<Value> {
    (
        proptest::collection::vec(proptest::collection::vec(requirement(), 0..3), 0..3),
        proptest::collection::vec(
            (any::<i32>(), proptest::collection::vec(requirement(), 0..2)),
            0..3,
        ),
    )
        .prop_map(|(terms, preferred)| {
            let terms: Vec<Value> = terms
                .into_iter()
                .map(|t| json!({"matchExpressions": t}))
                .collect();
            let preferred: Vec<Value> = preferred
                .into_iter()
                .map(|(w, t)| json!({"weight": w, "preference": {"matchExpressions": t}}))
                .collect();
            json!({"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
                "preferredDuringSchedulingIgnoredDuringExecution": preferred}})
        })
        .boxed()
}

fn containers() -> BoxedStrategy<Value> {
    proptest::collection::vec((text(), text()), 0..3)
        .prop_map(|c| {
            json!(
                c.into_iter()
                    .map(|(name, image)| json!({"name": name, "image": image}))
                    .collect::<Vec<_>>()
            )
        })
        .boxed()
}

/// Fields of a pod with values of the type the API server would send, odd content.
fn mutation() -> BoxedStrategy<(&'static str, Value)> {
    prop_oneof![
        string_map().prop_map(|v| ("/metadata/labels", v)),
        string_map().prop_map(|v| ("/metadata/annotations", v)),
        string_map().prop_map(|v| ("/spec/nodeSelector", v)),
        text().prop_map(|v| ("/metadata/namespace", json!(v))),
        text().prop_map(|v| ("/spec/schedulerName", json!(v))),
        text().prop_map(|v| ("/spec/nodeName", json!(v))),
        text().prop_map(|v| ("/spec/priorityClassName", json!(v))),
        text().prop_map(|v| ("/spec/containers/0/image", json!(v))),
        proptest::collection::vec(text(), 0..3)
            .prop_map(|g| ("/spec/schedulingGates", json!(g.into_iter().map(|n| json!({"name": n})).collect::<Vec<_>>()))),
        affinity().prop_map(|v| ("/spec/affinity", v)),
        containers().prop_map(|v| ("/spec/initContainers", v)),
        containers().prop_map(|v| ("/spec/containers", v)),
        (text(), text()).prop_map(|(kind, name)| ("/metadata/ownerReferences", json!([{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": true}]))),
        any_json().prop_map(|v| ("/spec/affinity/nodeAffinity", v)),
    ]
    .boxed()
}

fn set(object: &mut Value, pointer: &str, value: Value) {
    let (parent, key) = pointer.rsplit_once('/').unwrap();
    let Some(parent) = object.pointer_mut(parent) else {
        return;
    };
    match parent {
        Value::Object(map) => {
            map.insert(key.to_owned(), value);
        }
        Value::Array(items) => {
            if let Some(slot) = key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                *slot = value;
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn any_bytes_are_answered_or_refused(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        for mode in [PlacementMode::Scheduler, PlacementMode::SchedulingGate] {
            let _ = review(&body, &WebhookConfig::new(mode, "multiarch-scheduler", "multiarch"));
        }
    }

    /// Values of any type anywhere: refused or answered, never a panic.
    #[test]
    fn ill_typed_pods_are_refused_or_answered(path in 0usize..4, value in any_json()) {
        let mut request = fixture("admissionreview-request-1.json");
        let pointer = ["/metadata/labels", "/spec/containers", "/spec/schedulingGates", "/spec/affinity"][path];
        set(&mut request["request"]["object"], pointer, value);
        for mode in [PlacementMode::Scheduler, PlacementMode::SchedulingGate] {
            let config = WebhookConfig::new(mode, "multiarch-scheduler", "multiarch");
            let _ = review(&serde_json::to_vec(&request).unwrap(), &config);
        }
    }

    #[test]
    fn patches_apply_to_whatever_pod_was_sent(
        fixture_index in 0usize..3,
        mutations in proptest::collection::vec(mutation(), 1..4),
        gate_mode in any::<bool>(),
    ) {
        let mut request = fixture(&format!("admissionreview-request-{fixture_index}.json"));
        for (path, value) in mutations {
            set(&mut request["request"]["object"], path, value);
        }
        let mode = if gate_mode { PlacementMode::SchedulingGate } else { PlacementMode::Scheduler };
        let config = WebhookConfig::new(mode, "multiarch-scheduler", "multiarch");
        let Ok((response, _)) = review(&serde_json::to_vec(&request).unwrap(), &config) else {
            return Ok(());
        };
        prop_assert_eq!(&response["response"]["uid"], &request["request"]["uid"]);
        if let Some(patch) = response["response"]["patch"].as_str() {
            let ops: json_patch::Patch = serde_json::from_slice(
                &base64::engine::general_purpose::STANDARD.decode(patch).unwrap(),
            )
            .unwrap();
            let mut pod = request["request"]["object"].clone();
            let applied = json_patch::patch(&mut pod, &ops);
            prop_assert!(applied.is_ok(), "patch {:?} does not apply to {}", ops, request["request"]["object"]);
        }
    }
}
