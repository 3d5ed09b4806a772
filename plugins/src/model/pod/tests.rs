//! Reading pods from the API object: requests, ports, affinity, spread, images.

use super::*;

const MI: i64 = 1024 * 1024;

/// kube's `PodRequests` cases: init containers take the max, sidecars add up.
#[test]
fn effective_requests_follow_the_init_and_sidecar_rules() {
    let cases: Vec<(&str, PodBuilder, i64, i64)> = vec![
        (
            "containers add up",
            PodBuilder::new("ns", "p")
                .container("a", "i", "100m", "100Mi")
                .container("b", "i", "200m", "50Mi"),
            300,
            150 * MI,
        ),
        (
            "a larger init container wins",
            PodBuilder::new("ns", "p")
                .init_container("init", "i", "2", "10Mi")
                .container("a", "i", "100m", "100Mi"),
            2000,
            100 * MI,
        ),
        (
            "sidecars add to containers",
            PodBuilder::new("ns", "p")
                .sidecar("proxy", "i", "50m", "20Mi")
                .container("a", "i", "100m", "100Mi"),
            150,
            120 * MI,
        ),
        (
            "init after a sidecar runs beside it",
            PodBuilder::new("ns", "p")
                .sidecar("proxy", "i", "500m", "20Mi")
                .init_container("migrate", "i", "1", "10Mi")
                .container("a", "i", "100m", "100Mi"),
            1500,
            120 * MI,
        ),
        (
            "init before a sidecar does not",
            PodBuilder::new("ns", "p")
                .init_container("migrate", "i", "1", "10Mi")
                .sidecar("proxy", "i", "500m", "20Mi")
                .container("a", "i", "100m", "100Mi"),
            1000,
            120 * MI,
        ),
        (
            "overhead is added",
            PodBuilder::new("ns", "p")
                .container("a", "i", "100m", "100Mi")
                .overhead("250m", "120Mi"),
            350,
            220 * MI,
        ),
    ];
    for (name, builder, cpu, memory) in cases {
        let info = builder.info();
        assert_eq!(info.requests.milli_cpu, cpu, "{name}");
        assert_eq!(info.requests.memory, memory, "{name}");
    }
}

#[test]
fn best_effort_containers_count_default_requests_for_scoring() {
    let info = PodBuilder::new("ns", "p")
        .container("a", "i", "", "")
        .info();
    assert!(info.requests.is_zero());
    assert_eq!(info.non_zero.milli_cpu, 100);
    assert_eq!(info.non_zero.memory, 200 * MI);
}

#[test]
fn images_include_init_containers_and_pull_policy() {
    let info = PodBuilder::new("ns", "p")
        .init_container("init", "busybox:1.36", "", "")
        .container("app", "quay.io/org/app", "", "")
        .container("pinned", "quay.io/org/app@sha256:abc", "", "")
        .info();
    let images: Vec<(&str, bool)> = info
        .images
        .iter()
        .map(|i| (i.image.as_str(), i.pull_always))
        .collect();
    assert_eq!(
        images,
        [
            ("busybox:1.36", false),
            ("quay.io/org/app", true),
            ("quay.io/org/app@sha256:abc", false)
        ]
    );
}

#[test]
fn host_ports_default_to_tcp_on_every_address() {
    let info = PodBuilder::new("ns", "p")
        .container("a", "i", "", "")
        .host_port(8080, "TCP", "")
        .info();
    let port = &info.host_ports[0];
    assert_eq!(
        (port.protocol.as_str(), port.ip.as_str(), port.port),
        ("TCP", "0.0.0.0", 8080)
    );
    let specific = HostPort {
        protocol: "TCP".into(),
        ip: "10.0.0.1".into(),
        port: 8080,
    };
    let other_ip = HostPort {
        protocol: "TCP".into(),
        ip: "10.0.0.2".into(),
        port: 8080,
    };
    let udp = HostPort {
        protocol: "UDP".into(),
        ip: "0.0.0.0".into(),
        port: 8080,
    };
    assert!(port.conflicts_with(&specific));
    assert!(!specific.conflicts_with(&other_ip));
    assert!(!port.conflicts_with(&udp));
}

#[test]
fn invalid_quantities_are_an_error() {
    let pod = PodBuilder::new("ns", "p")
        .container("a", "i", "lots", "")
        .obj();
    assert!(PodInfo::from_pod(&pod).is_err());
}
