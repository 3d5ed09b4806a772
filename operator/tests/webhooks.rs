//! The webhooks the operator serves, called over HTTPS as the API server calls them
//! (verified against the CA bundle it writes), and the admission policy of
//! `manifests/operator/` run by the fake API server.

#![allow(clippy::unwrap_used)]

mod common;

use std::{sync::Arc, time::Duration};

use base64::Engine;
use common::{https::request, *};
use multiarch_crd::conversion::{V1ALPHA1, V1BETA1};
use serde_json::{Value, json};

async fn ready_operator(server: &multiarch_fake_apiserver::FakeApiServer) -> (Operator, Vec<u8>) {
    let operator = start_operator(server, Duration::from_secs(600)).await;
    eventually("a serving certificate", || {
        operator.running.serving.is_set()
    })
    .await;
    let ca = get(server, "secrets", "multiarch-ca").unwrap();
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(ca["data"]["ca-bundle.crt"].as_str().unwrap())
        .unwrap();
    (operator, bundle)
}

async fn post(operator: &Operator, bundle: &[u8], path: &str, review: &Value) -> Value {
    let (status, body, _) = request(
        operator.addr,
        bundle,
        "multiarch-operator.multiarch.svc",
        "POST",
        path,
        review.to_string().as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

/// Every v1beta1 ClusterPodPlacementConfig we ship or test with: the sample and the
/// valid fixtures.
fn samples() -> Vec<Value> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("manifests/samples/clusterpodplacementconfig.yaml")];
    for entry in std::fs::read_dir(root.join("crd/tests/fixtures/valid")).unwrap() {
        files.push(entry.unwrap().path());
    }
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(document).unwrap();
            if value["kind"] == "ClusterPodPlacementConfig" && value["apiVersion"] == V1BETA1 {
                out.push(value);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_converts_to_v1alpha1_and_back_unchanged() {
    let server = cluster().await;
    let (operator, bundle) = ready_operator(&server).await;
    let samples = samples();
    assert!(samples.len() >= 3, "{}", samples.len());
    for sample in samples {
        let down = post(
            &operator,
            &bundle,
            "/convert",
            &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                    "request": {"uid": "u-1", "desiredAPIVersion": V1ALPHA1, "objects": [sample]}}),
        )
        .await;
        assert_eq!(down["response"]["result"]["status"], "Success", "{down}");
        assert_eq!(down["response"]["uid"], "u-1");
        let alpha = down["response"]["convertedObjects"][0].clone();
        assert_eq!(alpha["apiVersion"], V1ALPHA1);
        assert!(alpha["spec"].get("plugins").is_none() && alpha["spec"].get("placement").is_none());
        let up = post(
            &operator,
            &bundle,
            "/convert",
            &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                    "request": {"uid": "u-2", "desiredAPIVersion": V1BETA1, "objects": [alpha]}}),
        )
        .await;
        let mut expected = sample.clone();
        // MTO's empty fallback means "none" and is not carried.
        if expected["spec"]["fallbackArchitecture"] == "" {
            expected["spec"]
                .as_object_mut()
                .unwrap()
                .remove("fallbackArchitecture");
        }
        assert_eq!(up["response"]["convertedObjects"][0], expected);
    }
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_and_priorities_are_validated_over_https() {
    let server = cluster().await;
    let (operator, bundle) = ready_operator(&server).await;
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        json!({"metadata": {"name": "prefs", "namespace": "shop"}, "spec": {"priority": 10, "plugins": {}}}),
    );
    let delete = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "d-1", "operation": "DELETE", "name": "cluster", "oldObject": cppc(json!({}))}});
    let answer = post(
        &operator,
        &bundle,
        "/validate/clusterpodplacementconfigs",
        &delete,
    )
    .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(
        answer["response"]["status"]["message"],
        "cannot delete the ClusterPodPlacementConfig while PodPlacementConfigs exist: shop/prefs; delete them first"
    );
    let duplicate = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "p-1", "operation": "CREATE", "namespace": "shop",
                    "object": {"metadata": {"name": "other", "namespace": "shop"}, "spec": {"priority": 10, "plugins": {}}}}});
    let answer = post(
        &operator,
        &bundle,
        "/validate/podplacementconfigs",
        &duplicate,
    )
    .await;
    assert_eq!(answer["response"]["allowed"], false);
    assert!(
        answer["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .starts_with("priority 10 is already used by PodPlacementConfig \"prefs\"")
    );
    server.delete(
        "multiarch.openshift.io/podplacementconfigs",
        "shop",
        "prefs",
    );
    assert_eq!(
        post(
            &operator,
            &bundle,
            "/validate/clusterpodplacementconfigs",
            &delete
        )
        .await["response"]["allowed"],
        true
    );
    assert_eq!(
        post(
            &operator,
            &bundle,
            "/validate/podplacementconfigs",
            &duplicate
        )
        .await["response"]["allowed"],
        true
    );
    // A certificate for another name is refused by the client, as the API server would.
    assert!(
        request(
            operator.addr,
            &bundle,
            "elsewhere.example.com",
            "GET",
            "/healthz",
            b""
        )
        .await
        .is_err()
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_selector_the_api_server_would_refuse_is_refused_when_written() {
    let server = cluster().await;
    let (operator, bundle) = ready_operator(&server).await;
    let review = |operation: &str, selector: Value| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "c-1", "operation": operation, "name": "cluster",
                        "object": cppc(json!({"namespaceSelector": selector}))}})
    };
    // A key prefix longer than a DNS subdomain: past what the CRD's CEL checks.
    let long_prefix = format!("{}.example.com/team", "a".repeat(250));
    for (operation, selector, message) in [
        (
            "CREATE",
            json!({"matchExpressions": [{"key": "team", "operator": "NotIn"}]}),
            "spec.namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
        ),
        (
            "UPDATE",
            json!({"matchLabels": {long_prefix.clone(): "payments"}}),
            "spec.namespaceSelector.matchLabels: Invalid value:",
        ),
    ] {
        let path = "/validate/clusterpodplacementconfigs";
        let answer = post(&operator, &bundle, path, &review(operation, selector)).await;
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let said = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(
            said.starts_with(&format!(
                "the namespaceSelector would be refused in the webhook configuration: {message}"
            )),
            "{said}"
        );
    }
    let fine = review(
        "CREATE",
        json!({"matchExpressions": [{"key": "multiarch.openshift.io/exclude-pod-placement", "operator": "DoesNotExist"}]}),
    );
    let answer = post(
        &operator,
        &bundle,
        "/validate/clusterpodplacementconfigs",
        &fine,
    )
    .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    operator.stop().await;
}

#[tokio::test]
async fn a_pod_placement_config_needs_the_cluster_pod_placement_config() {
    let server = Arc::new(cluster().await);
    let client = client(&server);
    let api: kube::Api<multiarch_crd::PodPlacementConfig> = kube::Api::namespaced(client, "shop");
    let ppc: multiarch_crd::PodPlacementConfig = serde_json::from_value(json!({
        "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
        "metadata": {"name": "prefs"},
        "spec": {"priority": 1, "plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 10}]}}},
    }))
    .unwrap();
    let refused = api
        .create(&kube::api::PostParams::default(), &ppc)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused}")
    };
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "podplacementconfigs.multiarch.openshift.io \"prefs\" is forbidden: ValidatingAdmissionPolicy 'podplacementconfig-requires-clusterpodplacementconfig' with binding 'create-the-clusterpodplacementconfig-cluster-first' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster", "deletionTimestamp": "2026-11-24T00:00:00Z", "finalizers": ["x"]}, "spec": {}}),
    );
    let refused = api
        .create(&kube::api::PostParams::default(), &ppc)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused}")
    };
    assert!(
        status
            .message
            .ends_with("denied request: the ClusterPodPlacementConfig 'cluster' is being deleted: create PodPlacementConfigs again once it is recreated"),
        "{}",
        status.message
    );
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"}, "spec": {}}),
    );
    api.create(&kube::api::PostParams::default(), &ppc)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn architecture_rules_are_checked_when_written() {
    let server = cluster().await;
    let (operator, bundle) = ready_operator(&server).await;
    let review = |operation: &str, expression: &str, old: Option<&str>| {
        let config = |expression: &str| {
            json!({"metadata": {"name": "tiers", "namespace": "shop"}, "spec": {"priority": 1,
                "plugins": {"celArchitecturePlacement": {"enabled": true,
                    "fallbackArchitectures": ["amd64"],
                    "rules": [{"name": "db", "expression": expression, "architectures": ["ppc64le"]}]}}}})
        };
        let mut request = json!({"uid": "r-1", "operation": operation, "namespace": "shop",
            "object": config(expression)});
        if let Some(old) = old {
            request["oldObject"] = config(old);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    };
    let path = "/validate/podplacementconfigs";
    for (expression, says) in [
        (
            "self.spec.containers.size() > 1",
            "rules[0].expression: Invalid value: \"self.spec.containers.size() > 1\": rule \"db\": ERROR: <input>:1:6: self.spec: a rule may read only self.metadata.name, self.metadata.namespace, self.metadata.labels and self.metadata.annotations",
        ),
        ("self['status'] == {}", "ERROR: <input>:1:1: self:"),
        ("self.metadata.labels['tier'] ==", "ERROR: <input>:1:"),
        (
            "self.metadata.labels",
            "the expression must return a bool, not map(string, string)",
        ),
    ] {
        let answer = post(
            &operator,
            &bundle,
            path,
            &review("CREATE", expression, None),
        )
        .await;
        assert_eq!(answer["response"]["allowed"], false, "{answer}");
        let said = answer["response"]["status"]["message"].as_str().unwrap();
        assert!(
            said.starts_with("PodPlacementConfig \"tiers\" is invalid: spec.plugins.celArchitecturePlacement.rules[0].expression")
                && said.contains(says),
            "{expression}: {said}"
        );
    }
    let fine = "'tier' in self.metadata.labels && self.metadata.labels['tier'] == 'db'";
    let answer = post(&operator, &bundle, path, &review("CREATE", fine, None)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    // An update that changes a rule to one that reads the spec is refused too.
    let answer = post(
        &operator,
        &bundle,
        path,
        &review("UPDATE", "self.spec.nodeName == ''", Some(fine)),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_may_hold_one_config_of_maximal_rules_and_no_more() {
    let server = cluster().await;
    let (operator, bundle) = ready_operator(&server).await;
    let rules = |count: usize| {
        (0..count)
            .map(|i| {
                json!({"name": format!("r{i}"), "architectures": ["arm64"],
                "expression": format!("self.metadata.name == '{i:01000}'")})
            })
            .collect::<Vec<_>>()
    };
    let config = |name: &str, priority: u8, count: usize| {
        json!({"metadata": {"name": name, "namespace": "shop"}, "spec": {"priority": priority,
            "plugins": {"celArchitecturePlacement": {"enabled": true,
                "fallbackArchitectures": ["amd64"], "rules": rules(count)}}}})
    };
    let review = |object: Value| {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "b-1", "operation": "CREATE", "namespace": "shop", "object": object}})
    };
    let path = "/validate/podplacementconfigs";
    // Twenty configs of 1,000 rules of 1 KiB were each accepted before; one fits now.
    let answer = post(&operator, &bundle, path, &review(config("first", 1, 1000))).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    server.apply(
        "multiarch.openshift.io/podplacementconfigs",
        config("first", 1, 1000),
    );
    let answer = post(&operator, &bundle, path, &review(config("second", 2, 1000))).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(
        answer["response"]["status"]["message"],
        "PodPlacementConfig \"second\" would bring namespace \"shop\"'s PodPlacementConfigs to 2000 rules with 2048000 bytes of expressions, more than the 1000 rules with 1048576 bytes of expressions a namespace may have: use fewer or shorter rules"
    );
    // Its rewrite: the API server's UPDATE review carries it twice, with the managed
    // fields server-side apply records (an entry per rule): over 2 MB of JSON in 12,000
    // objects, which a review must still be read for.
    let managed = |config: &Value| {
        let mut rules = serde_json::Map::new();
        for rule in config["spec"]["plugins"]["celArchitecturePlacement"]["rules"]
            .as_array()
            .unwrap()
        {
            rules.insert(
                format!("k:{{\"name\":\"{}\"}}", rule["name"].as_str().unwrap()),
                json!({".": {}, "f:architectures": {}, "f:expression": {}, "f:name": {}}),
            );
        }
        let mut config = config.clone();
        config["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Apply",
            "apiVersion": "multiarch.openshift.io/v1beta1", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:priority": {}, "f:plugins": {"f:celArchitecturePlacement": {
                "f:enabled": {}, "f:fallbackArchitectures": {}, "f:rules": rules}}}}}]);
        config
    };
    let old = managed(&config("first", 1, 1000));
    let mut new = old.clone();
    new["spec"]["plugins"]["celArchitecturePlacement"]["rules"][0]["expression"] =
        json!("self.metadata.name == 'rewritten'");
    let update = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "b-2", "operation": "UPDATE", "namespace": "shop",
            "object": new, "oldObject": old}});
    assert!(update.to_string().len() > 2_000_000);
    let answer = post(&operator, &bundle, path, &update).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    // Configs without rules are not limited.
    let plain = json!({"metadata": {"name": "plain", "namespace": "shop"}, "spec": {"priority": 3, "plugins": {}}});
    let answer = post(&operator, &bundle, path, &review(plain)).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_name_that_is_another_schedulers_is_refused() {
    let server = cluster().await;
    let (operator, bundle) = ready_operator(&server).await;
    let path = "/validate/clusterpodplacementconfigs";
    let review = |name: &str, old: Option<&str>| {
        let object = |name: &str| cppc(json!({"placement": {"schedulerName": name}}));
        let mut request = json!({"uid": "s-1", "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
            "name": "cluster", "object": object(name)});
        if let Some(old) = old {
            request["oldObject"] = object(old);
        }
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
    };
    let message = |answer: &Value| {
        answer["response"]["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    // kube-scheduler's name, whatever the events say (the CRD refuses it too).
    let answer = post(&operator, &bundle, path, &review("default-scheduler", None)).await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert!(message(&answer).starts_with("schedulerName may not be default-scheduler"));
    // A secondary scheduler already binding pods with its name.
    server.apply(
        "events",
        json!({"metadata": {"name": "web-1.18a", "namespace": "shop"},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "web-1"},
            "reason": "Scheduled", "type": "Normal", "message": "Successfully assigned shop/web-1 to node-1",
            "reportingComponent": "gpu-scheduler", "reportingInstance": "gpu-scheduler-7d9f"}),
    );
    let answer = post(
        &operator,
        &bundle,
        path,
        &review("gpu-scheduler", Some("multiarch-scheduler")),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(
        message(&answer),
        "schedulerName \"gpu-scheduler\" is used by another scheduler in the cluster (it placed shop/web-1, reported by \"gpu-scheduler-7d9f\"): multiarch must not take its name, or it would place and release that scheduler's pods; choose another"
    );
    // A name nobody schedules with, and an unchanged one, are accepted.
    let answer = post(
        &operator,
        &bundle,
        path,
        &review("arch-aware", Some("multiarch-scheduler")),
    )
    .await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    let unchanged = review("gpu-scheduler", Some("gpu-scheduler"));
    let answer = post(&operator, &bundle, path, &unchanged).await;
    assert_eq!(answer["response"]["allowed"], true, "{answer}");
    operator.stop().await;
}
