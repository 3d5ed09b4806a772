//! Pod events against the fake API server: repeats fold into a series, a changed note is a
//! new event (kube-scheduler's folding showed a stale reason), long notes are cut.

#![allow(clippy::unwrap_used)]

use multiarch_fake_apiserver::FakeApiServer;
use multiarch_runtime::{
    event_reason::EventReason,
    event_recorder::{EventRecorder, NOTE_LENGTH_LIMIT, pod_reference},
};
use serde_json::Value;

fn events_for(server: &FakeApiServer, pod: &str) -> Vec<Value> {
    let mut events: Vec<Value> = server
        .list("events.k8s.io/events")
        .into_iter()
        .filter(|e| e["regarding"]["name"] == pod)
        .collect();
    events.sort_by_key(|e| e["metadata"]["name"].as_str().unwrap().to_owned());
    events
}

#[tokio::test]
async fn repeats_fold_into_a_series_and_a_changed_note_is_a_new_event() {
    let server = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let events = EventRecorder::new(client, "multiarch-scheduler", "replica-a");
    let web = pod_reference("shop", "web", Some("uid-web".into()));
    let publish = |note: &str| {
        events.publish(
            &web,
            EventReason::FailedScheduling,
            "Scheduling",
            note.to_owned(),
        )
    };

    publish("0/2 nodes are available: 2 Insufficient cpu.")
        .await
        .unwrap();
    publish("0/2 nodes are available: 2 Insufficient cpu.")
        .await
        .unwrap();
    let folded = events_for(&server, "web");
    assert_eq!(folded.len(), 1, "{folded:?}");
    assert_eq!(folded[0]["series"]["count"], 2);
    assert_eq!(
        folded[0]["note"],
        "0/2 nodes are available: 2 Insufficient cpu."
    );
    assert_eq!(folded[0]["reportingController"], "multiarch-scheduler");
    assert_eq!(folded[0]["reportingInstance"], "replica-a");
    assert_eq!(folded[0]["type"], "Warning");
    assert_eq!(folded[0]["regarding"]["uid"], "uid-web");

    // The reason changed: a new event says so, the old one keeps its count.
    publish("0/3 nodes are available: 3 node(s) didn't match the pod's image architectures.")
        .await
        .unwrap();
    let both = events_for(&server, "web");
    assert_eq!(both.len(), 2, "{both:?}");
    let notes: Vec<&str> = both.iter().map(|e| e["note"].as_str().unwrap()).collect();
    assert!(notes.contains(
        &"0/3 nodes are available: 3 node(s) didn't match the pod's image architectures."
    ));
    let changed = both
        .iter()
        .find(|e| e["note"].as_str().unwrap().starts_with("0/3"))
        .unwrap();
    assert!(changed["series"].is_null());

    // The same note for another pod is that pod's event.
    let other = pod_reference("shop", "other", Some("uid-other".into()));
    events
        .publish(
            &other,
            EventReason::FailedScheduling,
            "Scheduling",
            "0/2 nodes are available: 2 Insufficient cpu.".into(),
        )
        .await
        .unwrap();
    assert_eq!(events_for(&server, "other").len(), 1);
    assert_eq!(events_for(&server, "web").len(), 2);
}

#[tokio::test]
async fn a_note_over_the_api_s_limit_is_cut_and_still_published() {
    let server = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let events = EventRecorder::new(client, "multiarch-scheduler", "replica-a");
    let web = pod_reference("shop", "web", Some("uid-web".into()));
    events
        .publish(
            &web,
            EventReason::FailedScheduling,
            "Scheduling",
            "x".repeat(5000),
        )
        .await
        .unwrap();
    let published = events_for(&server, "web");
    assert_eq!(published.len(), 1);
    let note = published[0]["note"].as_str().unwrap();
    assert_eq!(note.len(), NOTE_LENGTH_LIMIT);
    assert!(note.ends_with(" ..."));
}

#[tokio::test]
async fn an_event_the_server_expired_starts_a_new_series() {
    let server = FakeApiServer::start().await;
    let client = kube::Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
    let events = EventRecorder::new(client, "multiarch-gate-controller", "replica-a");
    let web = pod_reference("shop", "web", None);
    let publish = || {
        events.publish(
            &web,
            EventReason::ArchAwareSchedGateAdded,
            "PlacingByArchitecture",
            "gated".into(),
        )
    };
    publish().await.unwrap();
    let first = events_for(&server, "web");
    // The type is the reason's.
    assert_eq!(first[0]["type"], "Normal");
    assert_eq!(first[0]["reason"], "ArchAwareSchedGateAdded");
    server.delete(
        "events.k8s.io/events",
        "shop",
        first[0]["metadata"]["name"].as_str().unwrap(),
    );
    publish().await.unwrap();
    let again = events_for(&server, "web");
    assert_eq!(again.len(), 1, "{again:?}");
    assert!(again[0]["series"].is_null());
}
