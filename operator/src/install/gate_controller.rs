//! The gate controller: the path of gated pods (gate mode, and in scheduler mode the
//! pods the scheduler does not place).

use serde_json::{Value, json};

use super::{
    GATE_CONTROLLER, Settings,
    inspector::{CLIENT_DIR, inspector_endpoint, mount_inspector_client},
    lease_role, rbac_pair, service_account,
    workload::{
        Workload, deployment, disruption_budget, downward_env, network_policy, open_port, service,
    },
};

const METRICS_PORT: u16 = 8080;

/// What the gate controller calls cluster-wide.
pub fn gate_controller_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]},
    ])
}

pub fn gate_controller_access(settings: &Settings) -> Vec<Value> {
    let mut objects = vec![service_account(settings, GATE_CONTROLLER)];
    objects.extend(rbac_pair(
        settings,
        GATE_CONTROLLER,
        "ClusterRole",
        GATE_CONTROLLER,
        gate_controller_rules(),
    ));
    objects.extend(lease_role(settings, GATE_CONTROLLER, GATE_CONTROLLER));
    objects
}

pub fn gate_controller_workload(settings: &Settings) -> Vec<Value> {
    let component = "gate-controller";
    let workload = Workload {
        name: GATE_CONTROLLER,
        component,
        args: json!([
            "gate-controller",
            format!("--inspector-endpoint={}", inspector_endpoint(settings)),
            format!("--inspector-tls-dir={CLIENT_DIR}"),
            format!("--metrics-addr=0.0.0.0:{METRICS_PORT}"),
            "--log-format=json"
        ]),
        ports: json!([{"name": "metrics", "containerPort": METRICS_PORT}]),
        probe_port: "metrics",
        env: downward_env(),
    };
    let mut deployment = deployment(settings, &workload);
    mount_inspector_client(&mut deployment);
    vec![
        deployment,
        service(
            settings,
            GATE_CONTROLLER,
            component,
            json!([{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}]),
        ),
        disruption_budget(settings, GATE_CONTROLLER, component),
        network_policy(
            settings,
            GATE_CONTROLLER,
            component,
            json!([open_port(METRICS_PORT)]),
        ),
    ]
}
