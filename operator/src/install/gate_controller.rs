//! The gate controller: the path of gated pods (gate mode, and in scheduler mode the
//! pods the scheduler does not place).

use multiarch_flags::{FlagsError, GateControllerArgs};
use serde_json::{Value, json};

use super::{
    GATE_CONTROLLER, Settings, inspector::inspector_client_controller, lease_role, rbac_pair,
    service_account,
};

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

pub fn gate_controller_workload(settings: &Settings) -> Result<Vec<Value>, FlagsError> {
    inspector_client_controller::<GateControllerArgs>(settings, GATE_CONTROLLER)
}
