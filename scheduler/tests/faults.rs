//! The scheduler against an API server that misbehaves (fault injection in the fake API
//! server): throttled, failing, hung and slow requests, dropped watches and `410 Gone`.
//! For every fault the scheduler recovers by itself, binds every pod exactly once and to
//! a node its images run on, and loses none.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Duration;

use common::{bindings, inspector, node, options, pod, ready};
use multiarch_fake_apiserver::{Effect, FakeApiServer, Fault, Method};
use multiarch_runtime::supervisor::Supervisor;
use multiarch_scheduler::in_cluster::metrics::SchedulerMetrics;
use tokio_util::sync::CancellationToken;

/// What a fault does, and what the phase checks: pods that must end bound.
struct Phase {
    name: &'static str,
    inject: fn(&FakeApiServer),
}

const PHASES: [Phase; 8] = [
    Phase {
        name: "throttled bindings (429)",
        inject: |s| {
            s.inject(Fault::new(Some(Method::POST), "/binding", Effect::Status(429)).times(3))
        },
    },
    Phase {
        name: "failing bindings (500)",
        inject: |s| {
            s.inject(Fault::new(Some(Method::POST), "/binding", Effect::Status(500)).times(3))
        },
    },
    Phase {
        name: "a hung binding",
        inject: |s| s.inject(Fault::new(Some(Method::POST), "/binding", Effect::Hang).times(1)),
    },
    Phase {
        name: "slow events",
        inject: |s| {
            s.inject(
                Fault::new(
                    Some(Method::POST),
                    "/events",
                    Effect::Delay(Duration::from_millis(1500)),
                )
                .times(3),
            );
        },
    },
    Phase {
        name: "failing events and status patches (500)",
        inject: |s| {
            s.inject(Fault::new(Some(Method::POST), "/events", Effect::Status(500)).times(5));
            s.inject(Fault::new(Some(Method::PATCH), "/status", Effect::Status(500)).times(5));
        },
    },
    Phase {
        name: "dropped watch connections",
        inject: FakeApiServer::break_watches,
    },
    Phase {
        name: "410 Gone on the resumed watches",
        inject: |s| {
            s.compact();
            s.break_watches();
        },
    },
    Phase {
        name: "failing relists (500)",
        inject: |s| {
            s.compact();
            s.inject(Fault::new(Some(Method::GET), "/api/v1/pods", Effect::Status(500)).times(2));
            s.inject(Fault::new(Some(Method::GET), "/api/v1/nodes", Effect::Status(500)).times(2));
            s.break_watches();
        },
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_is_recovered_from_without_losing_or_misplacing_a_pod() {
    let server = FakeApiServer::start().await;
    server.apply("nodes", node("amd-1", "amd64", "64"));
    server.apply("nodes", node("arm-1", "arm64", "64"));
    // The clients of the roles: requests (but watches) fail after a deadline.
    let client = multiarch_runtime::client::with_request_deadline(
        kube::Config::new(server.url().parse().unwrap()),
        Duration::from_secs(2),
    )
    .unwrap();
    let supervisor = Supervisor::new(CancellationToken::new());
    let scheduler = multiarch_scheduler::in_cluster::start(
        client,
        options("replica-a", false),
        inspector(),
        SchedulerMetrics::default(),
        &supervisor.tasks(),
    );
    ready(&scheduler).await;

    for (phase_index, phase) in PHASES.iter().enumerate() {
        (phase.inject)(&server);
        let names: Vec<(String, &str)> = (0..3)
            .map(|i| {
                let (image, arch) = if i % 2 == 0 {
                    ("arm:1", "arm-1")
                } else {
                    ("amd:1", "amd-1")
                };
                let name = format!("p{phase_index}-{i}");
                server.apply("pods", pod(&name, image, "100m"));
                (name, arch)
            })
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let placed: Vec<Option<String>> = names
                .iter()
                .map(|(n, _)| common::node_of(&server, n))
                .collect();
            if placed.iter().all(Option::is_some) {
                for ((name, node), placed) in names.iter().zip(&placed) {
                    assert_eq!(placed.as_deref(), Some(*node), "{}: {name}", phase.name);
                }
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: pods not bound: {placed:?}",
                phase.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server.clear_faults();
    }
    // No pod was bound twice: a second binding of a bound pod would have been sent after
    // a success (the fake refuses it with 409, and the scheduler would have seen a
    // conflict). Failed attempts (injected 429/500/hang) are the only repeats.
    for (phase_index, phase) in PHASES.iter().enumerate() {
        for i in 0..3 {
            let name = format!("p{phase_index}-{i}");
            let sent = bindings(&server, &name);
            let allowed = if phase_index < 3 { 4 } else { 1 };
            assert!(
                (1..=allowed).contains(&sent),
                "{}: {name} bound {sent} times",
                phase.name
            );
        }
    }
    assert!(!scheduler.task.is_finished(), "the scheduler stopped");
    scheduler.shutdown().await.unwrap();
}
