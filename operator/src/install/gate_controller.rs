//! The gate controller: the path of gated pods (gate mode, and in scheduler mode the
//! pods the scheduler does not place).

use multiarch_flags::{FlagsError, GateControllerArgs, RoleFlags, defaults};
use serde_json::{Value, json};

use super::{
    GATE_CONTROLLER, Settings,
    inspector::{inspector_client_controller, inspector_service},
    lease_role, rbac_pair, service_account,
    workload::{OPS_PORT, all_interfaces, role_args},
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
    let args = role_args(
        defaults::<GateControllerArgs>()?,
        &["metrics_addr"],
        |flags| {
            flags.inspector = inspector_service(settings);
            flags.ops.metrics_addr = all_interfaces(OPS_PORT);
        },
    )?;
    Ok(inspector_client_controller(
        settings,
        GATE_CONTROLLER,
        GateControllerArgs::SUBCOMMAND,
        args,
    ))
}
