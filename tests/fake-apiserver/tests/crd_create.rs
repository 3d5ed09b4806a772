//! CRD creation answers as the real API server's: the CRDs it refused on 2026-11-22 are
//! refused with the recorded answer, the ones in `manifests/crds/` are created, and custom
//! resources written through them are refused with the CRD's own messages.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Config,
    api::{DynamicObject, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use multiarch_fake_apiserver::{
    FakeApiServer,
    apiextensions::{check_crd, invalid_status},
};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/crd-create")
        .join(name)
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml_ng::from_str(&text).unwrap()
}

/// The objects of a `manifests/` folder in the order `kubectl apply -f DIR` sends them:
/// files by name, documents in file order.
fn manifests(dir: &str) -> Vec<Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../manifests")
        .join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    paths.sort();
    let mut objects = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        for document in serde_yaml_ng::Deserializer::from_str(&text) {
            let object: Value = serde::Deserialize::deserialize(document).unwrap();
            if !object.is_null() {
                objects.push(object);
            }
        }
    }
    objects
}

fn sorted_causes(status: &Value) -> Vec<String> {
    let mut causes: Vec<String> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("{} {} {}", c["reason"], c["field"], c["message"]))
        .collect();
    causes.sort();
    causes
}

#[test]
fn the_podplacementconfig_crd_of_2026_11_22_gets_the_recorded_answer() {
    let crd = yaml(&fixture("refused-2026-11-22-podplacementconfigs.yaml"));
    let recorded: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture(
            "refused-2026-11-22-podplacementconfigs.response.json",
        ))
        .unwrap(),
    )
    .unwrap();
    let errors = check_crd(&crd).errors;
    let ours = invalid_status(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        crd["metadata"]["name"].as_str().unwrap(),
        &errors,
    );
    for key in ["kind", "status", "reason", "code"] {
        assert_eq!(ours[key], recorded[key], "{key}");
    }
    for key in ["name", "group", "kind"] {
        assert_eq!(
            ours["details"][key], recorded["details"][key],
            "details.{key}"
        );
    }
    assert_eq!(sorted_causes(&ours), sorted_causes(&recorded));
    // The API server lists the errors in Go's map order: same errors, same length.
    let message = recorded["message"].as_str().unwrap();
    for error in &errors {
        assert!(
            message.contains(&error.to_string()),
            "{error} not in {message}"
        );
    }
    assert_eq!(ours["message"].as_str().unwrap().len(), message.len());
}

#[test]
fn the_clusterpodplacementconfig_crd_of_2026_11_22_is_refused_for_its_three_messages() {
    let crd = yaml(&fixture(
        "refused-2026-11-22-clusterpodplacementconfigs.yaml",
    ));
    let errors = check_crd(&crd).errors;
    let beta = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .position(|v| v["name"] == "v1beta1")
        .unwrap();
    let spec = format!("spec.versions[{beta}].schema.openAPIV3Schema.properties[spec].properties");
    let rule = ".x-kubernetes-validations[0].messageExpression";
    let fields = [
        format!("{spec}[placement].properties[percentageOfNodesToScore]{rule}"),
        format!("{spec}[placement].properties[scoring].items.properties[weight]{rule}"),
        format!(
            "{spec}[plugins].properties[nodeAffinityScoring].properties[platforms].items.properties[weight]{rule}"
        ),
    ];
    let over_budget: Vec<&str> = errors
        .iter()
        .filter(|e| {
            e.detail.starts_with(
                "estimated messageExpression cost exceeds budget by factor of more than 100x",
            )
        })
        .map(|e| e.field.as_str())
        .collect();
    assert_eq!(over_budget.len(), 3, "{errors:#?}");
    for field in &fields {
        assert!(
            over_budget.contains(&field.as_str()),
            "{field}: {errors:#?}"
        );
    }
    let total = errors.last().unwrap();
    assert_eq!(
        total.field,
        format!("spec.versions[{beta}].schema.openAPIV3Schema")
    );
    assert!(
        total
            .detail
            .starts_with("x-kubernetes-validations estimated rule cost total")
    );
    assert_eq!(errors.len(), 3 + 3 + 1, "{errors:#?}");
}

#[test]
fn the_checked_in_crds_are_created_and_reach_only_bounded_values() {
    let crds = manifests("crds");
    assert_eq!(crds.len(), 3);
    let mut costed = 0;
    for crd in &crds {
        let report = check_crd(crd);
        let name = &crd["metadata"]["name"];
        assert!(report.errors.is_empty(), "{name}: {:#?}", report.errors);
        assert!(report.reach.is_empty(), "{name}: {:#?}", report.reach);
        for (field, cost) in &report.costs {
            assert!(*cost <= 100_000, "{field} costs {cost}");
        }
        costed += report.costs.len();
    }
    // Every rule of the API is costed, not skipped.
    assert!(costed >= 15, "only {costed} rules and messages were costed");
}

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

#[tokio::test]
async fn kubectl_apply_of_the_crds_then_the_samples_succeeds() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PostParams::default();
    for crd in manifests("crds") {
        let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        crds.create(&pp, &crd).await.unwrap();
    }
    let refused: CustomResourceDefinition = serde_json::from_value(yaml(&fixture(
        "refused-2026-11-22-podplacementconfigs.yaml",
    )))
    .unwrap();
    let kube::Error::Api(status) = crds.create(&pp, &refused).await.unwrap_err() else {
        panic!("expected the API server's answer");
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status
            .message
            .contains("estimated messageExpression cost exceeds budget")
    );

    // A fresh cluster has only these namespaces; the samples create the others they use.
    let mut namespaces = vec!["default".to_owned()];
    for sample in manifests("samples") {
        if let Some(ns) = sample["metadata"]["namespace"].as_str() {
            assert!(
                namespaces.iter().any(|n| n == ns),
                "namespace {ns} is not created first"
            );
        }
        if sample["kind"] == "Namespace" {
            namespaces.push(sample["metadata"]["name"].as_str().unwrap().to_owned());
        }
        let created = api_for(&client, &sample)
            .create(&pp, &object(&sample))
            .await;
        assert!(
            created.is_ok(),
            "{}: {created:?}",
            sample["metadata"]["name"]
        );
    }
    assert_eq!(
        server
            .list("multiarch.openshift.io/clusterpodplacementconfigs")
            .len(),
        1
    );
    assert_eq!(
        server
            .list("multiarch.openshift.io/podplacementconfigs")
            .len(),
        1
    );
}

fn api_for(client: &Client, object: &Value) -> Api<DynamicObject> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let resource = ApiResource::from_gvk(&gvk);
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn object(value: &Value) -> DynamicObject {
    serde_json::from_value(value.clone()).unwrap()
}

fn cluster_config(spec: Value) -> Value {
    json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
        "metadata": {"name": "cluster"}, "spec": spec})
}

#[tokio::test]
async fn invalid_objects_are_refused_with_the_crd_messages() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let weight = |architecture: &str, weight: i64| {
        json!({"nodeAffinityScoring": {"enabled": true,
            "platforms": [{"architecture": architecture, "weight": weight}]}})
    };
    let mut wrong_name = cluster_config(json!({}));
    wrong_name["metadata"]["name"] = json!("other");
    let ppc = |priority: i64| {
        json!({"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig",
            "metadata": {"name": "p", "namespace": "shop"},
            "spec": {"priority": priority, "plugins": weight("arm64", 10)}})
    };
    let duplicate = json!({"nodeAffinityScoring": {"enabled": true, "platforms": [
        {"architecture": "arm64", "weight": 1}, {"architecture": "arm64", "weight": 2}]}});
    let cases = [
        (
            cluster_config(json!({"plugins": weight("arm64", 500)})),
            "spec.plugins.nodeAffinityScoring.platforms[0].weight: Invalid value: \"integer\": weight is out of range: use a value from 1 to 100",
        ),
        (
            cluster_config(json!({"plugins": weight("sparc", 10)})),
            "spec.plugins.nodeAffinityScoring.platforms[0].architecture: Invalid value: \"string\": architecture \"sparc\" is not supported: use one of amd64, arm64, ppc64le, s390x",
        ),
        (
            wrong_name,
            "<nil>: Invalid value: \"object\": ClusterPodPlacementConfig is a singleton: name it 'cluster'",
        ),
        (
            ppc(300),
            "spec.priority: Invalid value: \"integer\": priority is out of range: use a value from 0 to 255",
        ),
        (
            cluster_config(json!({"plugins": duplicate})),
            "spec.plugins.nodeAffinityScoring.platforms: Invalid value: \"array\": each architecture may appear only once in platforms: merge the duplicate entries into one",
        ),
        (
            cluster_config(json!({"placement": {"percentageOfNodesToScore": 101}})),
            "spec.placement.percentageOfNodesToScore: Invalid value: \"integer\": percentageOfNodesToScore is out of range: use 0 (adaptive) to 100",
        ),
    ];
    for (object_json, want) in cases {
        let created = api_for(&client, &object_json)
            .create(&PostParams::default(), &object(&object_json))
            .await;
        let Err(kube::Error::Api(status)) = created else {
            panic!("accepted: {object_json}");
        };
        assert_eq!(status.code, 422, "{want}");
        assert!(
            status.message.ends_with(want),
            "{}\nwant: {want}",
            status.message
        );
    }
    assert!(
        server
            .list("multiarch.openshift.io/clusterpodplacementconfigs")
            .is_empty()
    );
    assert!(
        server
            .list("multiarch.openshift.io/podplacementconfigs")
            .is_empty()
    );
}

#[tokio::test]
async fn custom_resources_are_pruned_and_defaulted() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let config = cluster_config(json!({"placement": {}, "unknownField": 1}));
    api_for(&client, &config)
        .create(&PostParams::default(), &object(&config))
        .await
        .unwrap();
    let stored = server
        .get(
            "multiarch.openshift.io/clusterpodplacementconfigs",
            "",
            "cluster",
        )
        .unwrap();
    assert_eq!(
        stored["spec"]["placement"]["schedulerName"],
        "multiarch-scheduler"
    );
    assert_eq!(stored["spec"]["placement"]["mode"], "Scheduler");
    assert_eq!(stored["spec"]["logVerbosity"], "Normal");
    assert!(stored["spec"].get("unknownField").is_none());
}
