//! The requests an operator makes, replayed against the fake in the order they were
//! recorded from a real kube-apiserver 1.36 (`shared/reference/apiserver/
//! operator-api-exchanges.json`, copied to `tests/fixtures/`): every status code, every
//! error body word for word, and the parts of successful answers an operator relies on.

#![allow(clippy::unwrap_used)]

use kube::{Client, Config};
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::{Value, json};

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

async fn send(client: &Client, request: &Value) -> (u16, Value) {
    let method = request["method"].as_str().unwrap();
    let mut builder = http::Request::builder()
        .method(method)
        .uri(request["path"].as_str().unwrap());
    let body = if request["body"].is_null() {
        Vec::new()
    } else {
        builder = builder.header("content-type", request["contentType"].as_str().unwrap());
        serde_json::to_vec(&request["body"]).unwrap()
    };
    let response = client
        .send(builder.body(kube::client::Body::from(body)).unwrap())
        .await
        .unwrap();
    let code = response.status().as_u16();
    let bytes = response.into_body().collect_bytes().await.unwrap();
    (code, serde_json::from_slice(&bytes).unwrap())
}

/// What differs between any two servers: identities, versions, times, field bookkeeping.
fn comparable(mut object: Value) -> Value {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "managedFields",
        ] {
            meta.remove(field);
        }
        if let Some(owners) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for owner in owners {
                owner.as_object_mut().unwrap().remove("uid");
            }
        }
    }
    object
}

#[tokio::test]
async fn the_recorded_operator_exchanges_replay_identically() {
    let exchanges: Vec<Value> =
        serde_json::from_str(include_str!("fixtures/operator-api-exchanges.json")).unwrap();
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let mut seen: Vec<(u16, Value)> = Vec::new();
    for exchange in &exchanges {
        let note = exchange["note"].as_str().unwrap();
        let mut request = exchange["request"].clone();
        // The owned object names its owner by the uid this server gave it.
        if request["body"]["metadata"]["ownerReferences"].is_array() {
            let uid =
                server.get("configmaps", "multiarch", "owner").unwrap()["metadata"]["uid"].clone();
            request["body"]["metadata"]["ownerReferences"][0]["uid"] = uid;
        }
        let (code, body) = send(&client, &request).await;
        let want = &exchange["response"];
        assert_eq!(
            code,
            want["status"].as_u64().unwrap() as u16,
            "{note}: {body}"
        );
        if code >= 400 {
            assert_eq!(body, want["body"], "{note}");
        } else {
            assert_eq!(
                comparable(body.clone()),
                comparable(want["body"].clone()),
                "{note}"
            );
        }
        seen.push((code, body));
    }
    let rv = |i: usize| seen[i].1["metadata"]["resourceVersion"].clone();
    // The unchanged apply wrote nothing; the forced one did and moved the field.
    assert_eq!(rv(1), rv(2));
    assert_eq!(
        seen[1].1["metadata"]["managedFields"],
        seen[2].1["metadata"]["managedFields"]
    );
    assert_ne!(rv(2), rv(4));
    assert_eq!(
        seen[4].1["metadata"]["managedFields"][0]["manager"],
        "someone-else"
    );
    // The finalizer kept the owner until it was removed; then its dependent went too.
    assert!(seen[12].1["metadata"]["deletionTimestamp"].is_string());
    assert!(server.get("configmaps", "multiarch", "owner").is_none());
    assert!(
        server.get("configmaps", "multiarch", "owned").is_none(),
        "the garbage collector deletes what the owner owned"
    );
}

#[tokio::test]
async fn a_finalizer_cannot_be_added_while_deleting_and_dependents_with_finalizers_wait() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    let owner = json!({"method": "POST", "path": "/api/v1/namespaces/multiarch/configmaps", "contentType": "application/json",
        "body": {"metadata": {"name": "owner", "finalizers": ["a"]}}});
    let (_, created) = send(&client, &owner).await;
    let uid = created["metadata"]["uid"].clone();
    let dependent = json!({"method": "POST", "path": "/api/v1/namespaces/multiarch/configmaps", "contentType": "application/json",
        "body": {"metadata": {"name": "dep", "finalizers": ["b"], "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}]}}});
    send(&client, &dependent).await;
    let delete =
        json!({"method": "DELETE", "path": "/api/v1/namespaces/multiarch/configmaps/owner"});
    assert_eq!(send(&client, &delete).await.0, 200);
    let add = json!({"method": "PATCH", "path": "/api/v1/namespaces/multiarch/configmaps/owner", "contentType": "application/merge-patch+json",
        "body": {"metadata": {"finalizers": ["a", "c"]}}});
    let (code, refused) = send(&client, &add).await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["message"],
        "ConfigMap \"owner\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted"
    );
    let remove = json!({"method": "PATCH", "path": "/api/v1/namespaces/multiarch/configmaps/owner", "contentType": "application/merge-patch+json",
        "body": {"metadata": {"finalizers": null}}});
    assert_eq!(send(&client, &remove).await.0, 200);
    assert!(server.get("configmaps", "multiarch", "owner").is_none());
    let dep = server.get("configmaps", "multiarch", "dep").unwrap();
    assert!(dep["metadata"]["deletionTimestamp"].is_string(), "{dep}");
    assert!(dep["metadata"]["ownerReferences"].is_null());
}

#[tokio::test]
async fn a_policy_parameter_that_is_missing_denies_with_the_binding_named() {
    let server = FakeApiServer::start().await;
    let client = client(&server);
    for (path, body) in [
        (
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
            json!({"metadata": {"name": "needs-cluster"}, "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig"},
            "matchConstraints": {"resourceRules": [{"apiGroups": ["multiarch.openshift.io"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["podplacementconfigs"]}]},
            "validations": [{"expression": "params != null"}]}}),
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
            json!({"metadata": {"name": "needs-cluster"}, "spec": {
            "policyName": "needs-cluster", "validationActions": ["Deny"],
            "paramRef": {"name": "cluster", "parameterNotFoundAction": "Deny"}}}),
        ),
    ] {
        let request = json!({"method": "POST", "path": path, "contentType": "application/json", "body": body});
        assert_eq!(send(&client, &request).await.0, 201);
    }
    let ppc = json!({"method": "POST", "path": "/apis/multiarch.openshift.io/v1beta1/namespaces/shop/podplacementconfigs", "contentType": "application/json",
        "body": {"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "PodPlacementConfig", "metadata": {"name": "prefs"},
                 "spec": {"plugins": {"nodeAffinityScoring": {"enabled": true, "platforms": [{"architecture": "arm64", "weight": 10}]}}}}});
    let (code, denied) = send(&client, &ppc).await;
    assert_eq!(code, 403, "{denied}");
    assert_eq!(
        denied["message"],
        "podplacementconfigs.multiarch.openshift.io \"prefs\" is forbidden: ValidatingAdmissionPolicy 'needs-cluster' with binding 'needs-cluster' denied request: failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    server.apply(
        "multiarch.openshift.io/clusterpodplacementconfigs",
        json!({"metadata": {"name": "cluster"}, "spec": {}}),
    );
    let (code, body) = send(&client, &ppc).await;
    assert_eq!(code, 201, "{body}");
}
