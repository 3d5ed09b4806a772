//! The fake answers kube-rs clients the way a real API server does.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::{
    Api, Client, Config,
    api::{ObjectMeta, PostParams},
    runtime::watcher,
};
use multiarch_fake_apiserver::FakeApiServer;
use serde_json::json;

fn client(server: &FakeApiServer) -> Client {
    Client::try_from(Config::new(server.url().parse().unwrap())).unwrap()
}

fn pod(name: &str) -> serde_json::Value {
    json!({"metadata": {"name": name, "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "i"}], "schedulerName": "multiarch-scheduler"}, "status": {"phase": "Pending"}})
}

fn binding(name: &str, uid: &str, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..ObjectMeta::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..ObjectReference::default()
        },
    }
}

/// The binding ends the pod's nomination (ClearingNominatedNodeNameAfterBinding, on by
/// default since 1.35), as recorded from kube-apiserver 1.36.2.
#[tokio::test]
async fn binding_clears_the_nomination_like_the_recorded_server() {
    let recorded: serde_json::Value = serde_json::from_str(include_str!(
        "../../fixtures/apiserver/pod-status-after-binding.json"
    ))
    .unwrap();
    assert!(recorded["statusAfterBinding"]["nominatedNodeName"].is_null());
    let server = FakeApiServer::start().await;
    let mut nominated = pod("web-1");
    nominated["status"]["nominatedNodeName"] = recorded["nominatedNodeNameBefore"].clone();
    let created = server.apply("pods", nominated);
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    pods.create_subresource::<Binding, serde_json::Value>(
        "binding",
        "web-1",
        &PostParams::default(),
        &(binding("web-1", &uid, "n1")),
    )
    .await
    .unwrap();
    let status = &server.get("pods", "default", "web-1").unwrap()["status"];
    assert!(status["nominatedNodeName"].is_null(), "{status}");
    assert_eq!(
        status["conditions"][0]["type"],
        recorded["statusAfterBinding"]["conditions"][0]["type"]
    );
    assert_eq!(
        status["conditions"][0]["status"],
        recorded["statusAfterBinding"]["conditions"][0]["status"]
    );
}

#[tokio::test]
async fn binding_answers_like_the_recorded_server() {
    let server = FakeApiServer::start().await;
    let created = server.apply("pods", pod("web-1"));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let pp = PostParams::default();

    let wrong = pods
        .create_subresource::<Binding, serde_json::Value>(
            "binding",
            "web-1",
            &pp,
            &(binding("web-1", "00000000-0000-0000-0000-000000000000", "amd-1")),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = wrong else {
        panic!()
    };
    assert_eq!(status.code, 409);
    assert!(
        status
            .message
            .contains("Precondition failed: UID in precondition"),
        "{}",
        status.message
    );

    pods.create_subresource::<Binding, serde_json::Value>(
        "binding",
        "web-1",
        &pp,
        &(binding("web-1", &uid, "amd-1")),
    )
    .await
    .unwrap();
    assert_eq!(
        server.get("pods", "default", "web-1").unwrap()["spec"]["nodeName"],
        "amd-1"
    );

    let again = pods
        .create_subresource::<Binding, serde_json::Value>(
            "binding",
            "web-1",
            &pp,
            &(binding("web-1", &uid, "amd-2")),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = again else {
        panic!()
    };
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on pods/binding \"web-1\": pod web-1 is already assigned to node \"amd-1\""
    );

    let missing = pods
        .create_subresource::<Binding, serde_json::Value>(
            "binding",
            "nope",
            &pp,
            &(binding("nope", &uid, "amd-1")),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = missing else {
        panic!()
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (404, "pods \"nope\" not found")
    );
}

#[tokio::test]
async fn watchers_see_changes_and_relist_after_410() {
    let server = FakeApiServer::start().await;
    server.apply("pods", pod("a"));
    let pods: Api<Pod> = Api::all(client(&server));
    let mut stream = watcher(
        pods,
        watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"),
    )
    .boxed();
    let mut names = Vec::new();
    // Initial list: Init, InitApply(a), InitDone.
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
    {
        match event.unwrap() {
            watcher::Event::InitApply(p) => names.push(p.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, ["a"]);
    server.apply("pods", pod("b"));
    let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(event, watcher::Event::Apply(ref p) if p.metadata.name.as_deref() == Some("b")),
        "{event:?}"
    );

    // A pod that finishes leaves the selector: DELETED.
    let mut done = pod("b");
    done["status"]["phase"] = json!("Succeeded");
    server.apply("pods", done);
    let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(event, watcher::Event::Delete(ref p) if p.metadata.name.as_deref() == Some("b")),
        "{event:?}"
    );

    // History compacted and the connection dropped: the watcher relists.
    server.apply("pods", pod("c"));
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap();
    // Changes the watcher has not seen, then compaction past them.
    server.apply("nodes", json!({"metadata": {"name": "n1"}}));
    server.compact();
    server.break_watches();
    let mut relisted = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap()
        {
            Ok(watcher::Event::InitApply(p)) => relisted.push(p.metadata.name.unwrap()),
            Ok(watcher::Event::InitDone) => break,
            _ => {}
        }
    }
    relisted.sort();
    assert_eq!(relisted, ["a", "c"]);
}

#[tokio::test]
async fn lists_are_paged_with_limit_and_continue() {
    let server = FakeApiServer::start().await;
    for i in 0..5 {
        server.apply("pods", pod(&format!("web-{i}")));
    }
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let mut names = Vec::new();
    let mut params = kube::api::ListParams::default().limit(2);
    let mut pages = 0;
    loop {
        let page = pods.list(&params).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 2);
        names.extend(page.items.iter().map(|p| p.metadata.name.clone().unwrap()));
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => {
                assert_eq!(
                    page.metadata.remaining_item_count,
                    Some(i64::try_from(5 - names.len()).unwrap())
                );
                params = params.continue_token(&token);
            }
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["web-0", "web-1", "web-2", "web-3", "web-4"]);
    let bad = pods
        .list(&kube::api::ListParams::default().continue_token("%%%"))
        .await
        .unwrap_err();
    assert!(matches!(bad, kube::Error::Api(s) if s.code == 400));
}

/// Every page of a list is read at the first page's resourceVersion, as kube-apiserver
/// 1.36.2 serves it (checked there: a label added and a pod deleted between two pages
/// do not show, and both pages carry the first one's version), so a watch started from
/// the list's version misses nothing. A token older than the compaction is `410 Expired`.
#[tokio::test]
async fn the_pages_of_a_list_are_one_snapshot() {
    let server = FakeApiServer::start().await;
    for name in ["q1", "q2", "q3"] {
        server.apply("pods", pod(name));
    }
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let first = pods
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .unwrap();
    let version = first.metadata.resource_version.clone().unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    let mut labelled = pod("q3");
    labelled["metadata"]["labels"] = json!({"changed": "yes"});
    server.apply("pods", labelled);
    server.delete("pods", "default", "q2");
    let rest = pods
        .list(&kube::api::ListParams::default().continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        rest.metadata.resource_version.as_deref(),
        Some(version.as_str())
    );
    let seen: Vec<(String, bool)> = rest
        .items
        .iter()
        .map(|p| {
            (
                p.metadata.name.clone().unwrap(),
                p.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("changed")),
            )
        })
        .collect();
    assert_eq!(seen, [("q2".to_owned(), false), ("q3".to_owned(), false)]);
    // A fresh list shows today's state.
    let now = pods.list(&kube::api::ListParams::default()).await.unwrap();
    assert_eq!(now.items.len(), 2);
    assert_ne!(now.metadata.resource_version, Some(version));

    server.compact();
    let expired = pods
        .list(&kube::api::ListParams::default().continue_token(&token))
        .await
        .unwrap_err();
    assert!(
        matches!(&expired, kube::Error::Api(s) if s.code == 410 && s.reason == "Expired"),
        "{expired}"
    );
}

#[tokio::test]
async fn metrics_count_requests_as_the_real_server_labels_them() {
    let server = FakeApiServer::start().await;
    let created = server.apply("pods", pod("web-1"));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    pods.create_subresource::<Binding, serde_json::Value>(
        "binding",
        "web-1",
        &PostParams::default(),
        &binding("web-1", &uid, "amd-1"),
    )
    .await
    .unwrap();
    pods.list(&kube::api::ListParams::default()).await.unwrap();
    let _ = pods.get("missing").await;
    let text = client(&server)
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    for line in [
        r#"apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 1"#,
        r#"apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1"#,
        r#"apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="GET",version="v1"} 1"#,
    ] {
        assert!(text.contains(line), "{line} not in\n{text}");
    }
}

/// A patch that names another pod's UID is refused as kube-apiserver 1.36.2 refuses it
/// (recorded: `tests/fixtures/apiserver/pod-status-patch-uid-mismatch.json`), and one with
/// the pod's own UID applies.
#[tokio::test]
async fn a_patch_naming_another_uid_is_refused_like_the_recorded_server() {
    let server = FakeApiServer::start().await;
    let created = server.apply("pods", pod("p"));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();
    let pods: Api<Pod> = Api::namespaced(client(&server), "default");
    let params = kube::api::PatchParams::default();
    let patch = |uid: &str, node: &str| json!({"metadata": {"uid": uid}, "status": {"nominatedNodeName": node}});

    let refused = pods
        .patch_status(
            "p",
            &params,
            &kube::api::Patch::Strategic(patch("00000000-0000-0000-0000-000000000001", "n2")),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused}")
    };
    let recorded: kube::core::Status = serde_json::from_str(include_str!(
        "../../fixtures/apiserver/pod-status-patch-uid-mismatch.json"
    ))
    .unwrap();
    assert_eq!(
        serde_json::to_value(&*status).unwrap(),
        serde_json::to_value(&recorded).unwrap()
    );
    assert!(
        server.get("pods", "default", "p").unwrap()["status"]["nominatedNodeName"].is_null(),
        "the refused patch was applied"
    );

    pods.patch_status(
        "p",
        &params,
        &kube::api::Patch::Strategic(patch(&uid, "n1")),
    )
    .await
    .unwrap();
    let stored = server.get("pods", "default", "p").unwrap();
    assert_eq!(stored["status"]["nominatedNodeName"], "n1");
    assert_eq!(stored["metadata"]["uid"], uid.as_str());
}

/// An event whose note is over 1024 bytes is refused as kube-apiserver 1.36.2 refuses it
/// (recorded: `tests/fixtures/apiserver/event-note-too-long.json`); 1024 bytes is accepted.
#[tokio::test]
async fn an_event_note_over_the_limit_is_refused_like_the_recorded_server() {
    use k8s_openapi::api::events::v1::Event;
    let server = FakeApiServer::start().await;
    let events: Api<Event> = Api::namespaced(client(&server), "default");
    let event = |name: &str, note: String| -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "eventTime": "2026-11-26T04:50:00.000000Z", "reportingController": "multiarch-scheduler",
            "reportingInstance": "a", "action": "Scheduling", "reason": "FailedScheduling",
            "type": "Warning", "note": note,
            "regarding": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "default"},
        }))
        .unwrap()
    };
    let refused = events
        .create(&PostParams::default(), &event("p.long", "x".repeat(1025)))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused}")
    };
    let recorded: kube::core::Status = serde_json::from_str(include_str!(
        "../../fixtures/apiserver/event-note-too-long.json"
    ))
    .unwrap();
    assert_eq!(
        serde_json::to_value(&*status).unwrap(),
        serde_json::to_value(&recorded).unwrap()
    );
    events
        .create(&PostParams::default(), &event("p.full", "x".repeat(1024)))
        .await
        .unwrap();
}
