//! The multiarch scheduler.

use multiarch_flags::{FlagsError, SchedulerArgs, defaults};
use serde_json::{Value, json};

use super::{
    SCHEDULER, Settings,
    inspector::{CLIENT_DIR, inspector_endpoint, mount_inspector_client},
    lease_role, rbac_pair, service_account,
    workload::{
        Workload, all_interfaces, deployment, disruption_budget, downward_env, network_policy,
        open_port, role_args, service,
    },
};
use multiarch_crd::names::PREVIOUS_SCHEDULER_NAMES;

const METRICS_PORT: u16 = 10259;

/// What the scheduler may do cluster-wide: read what the plugins read (DeviceClasses for
/// the extended resources they map); bind pods, write their scheduling status and evict
/// preemption victims; write volume decisions (a volume's claim reference, a claim's
/// selected node); publish events.
pub fn scheduler_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes", "namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumes", "persistentvolumeclaims"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses"], "verbs": ["get", "list", "watch"]},
    ])
}

/// Its ServiceAccount, cluster-wide rights and its Lease (named after the scheduler, in
/// multiarch's namespace only: never kube-scheduler's).
pub fn scheduler_access(settings: &Settings, scheduler_name: &str) -> Vec<Value> {
    let mut objects = vec![service_account(settings, SCHEDULER)];
    objects.extend(rbac_pair(
        settings,
        SCHEDULER,
        "ClusterRole",
        SCHEDULER,
        scheduler_rules(),
    ));
    objects.extend(lease_role(settings, SCHEDULER, scheduler_name));
    objects
}

/// Names a rename remembers.
pub const MAX_PREVIOUS_SCHEDULER_NAMES: usize = 4;

/// Its Deployment (placing pods named `scheduler_name`; `previous_names` it placed
/// before), metrics Service, disruption budget and network policy.
pub fn scheduler_workload(
    settings: &Settings,
    scheduler_name: &str,
    previous_names: &[String],
) -> Result<Vec<Value>, FlagsError> {
    let component = "scheduler";
    let args = role_args(
        defaults::<SchedulerArgs>()?,
        &["scheduler_name", "metrics_addr"],
        |flags| {
            flags.scheduler_name = scheduler_name.to_owned();
            flags.inspector_endpoint = Some(inspector_endpoint(settings));
            flags.inspector_tls.inspector_tls_dir = Some(CLIENT_DIR.into());
            flags.metrics_addr = all_interfaces(METRICS_PORT);
        },
    )?;
    let workload = Workload {
        name: SCHEDULER,
        component,
        args,
        ports: json!([{"name": "metrics", "containerPort": METRICS_PORT}]),
        probe_port: "metrics",
        env: downward_env(),
    };
    let mut deployment = deployment(settings, &workload);
    mount_inspector_client(&mut deployment);
    if !previous_names.is_empty() {
        deployment["metadata"]["annotations"][PREVIOUS_SCHEDULER_NAMES] =
            json!(previous_names.join(","));
    }
    Ok(vec![
        deployment,
        service(
            settings,
            SCHEDULER,
            component,
            json!([{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}]),
        ),
        disruption_budget(settings, SCHEDULER, component),
        network_policy(
            settings,
            SCHEDULER,
            component,
            json!([open_port(METRICS_PORT)]),
        ),
    ])
}
