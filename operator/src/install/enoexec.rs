//! The exec-format-error monitor: the daemon on every node and its handler.

use multiarch_flags::{EnoexecDaemonArgs, EnoexecHandlerArgs, FlagsError, RoleFlags, parse_argv};
use serde_json::{Value, json};

use super::{
    ENOEXEC_DAEMON, ENOEXEC_HANDLER, Settings,
    inspector::inspector_client_controller,
    labels, lease_rules, rbac_pair, service_account,
    workload::{
        OPS_PORT, all_interfaces, liveness_probe, network_policy, open_port, readiness_probe,
        role_args, service,
    },
};

/// The host's `/run` inside the daemon: containerd's and CRI-O's sockets are under it, and
/// mounting the directory (not one socket) lets one DaemonSet serve both runtimes.
pub const HOST_RUN: &str = "/host/run";
/// The host's cgroup hierarchy inside the daemon, to find a container by cgroup id after its
/// process is gone (the daemon's own /sys/fs/cgroup is its cgroup namespace's view).
pub const HOST_CGROUP: &str = "/host/sys/fs/cgroup";
/// The directory of a runtime socket given by the operator's settings, inside the daemon:
/// the directory, not the socket, so that a runtime restart's new socket is seen.
pub const HOST_RUNTIME: &str = "/host/runtime";

/// What `multiarch enoexec-daemon` calls in multiarch's namespace: it writes ENoExecEvents.
pub fn enoexec_daemon_rules() -> Value {
    json!([
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents"], "verbs": ["create", "delete"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents/status"], "verbs": ["patch"]},
    ])
}

/// What `multiarch enoexec-daemon` calls cluster-wide: it watches its own node and
/// labels it with its x86-64 level. RBAC cannot say "its own node"; the admission policy
/// [`super::operator::ENOEXEC_DAEMON_NODE_POLICY`] does (and "only that label").
pub fn enoexec_daemon_cluster_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    ])
}

/// What `multiarch enoexec-handler` calls cluster-wide: the reports (get and label the
/// pod, get its node), and the misplaced-pod correction (list the names of the pods on
/// nodes and read each, watch the nodes' metadata, read the ClusterPodPlacementConfig, a
/// namespace's labels and a Job's retries, evict).
pub fn enoexec_handler_cluster_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs"], "verbs": ["get"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ])
}

/// What `multiarch enoexec-handler` calls in multiarch's namespace.
pub fn enoexec_handler_namespace_rules() -> Value {
    let mut rules = vec![
        json!({"apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents"], "verbs": ["get", "list", "watch", "delete"]}),
    ];
    rules.extend(lease_rules(ENOEXEC_HANDLER));
    Value::Array(rules)
}

/// The daemon's ServiceAccount, its right to write ENoExecEvents and to label its node.
pub fn enoexec_daemon_access(settings: &Settings) -> Vec<Value> {
    let mut objects = vec![service_account(settings, ENOEXEC_DAEMON)];
    objects.extend(rbac_pair(
        settings,
        ENOEXEC_DAEMON,
        "Role",
        ENOEXEC_DAEMON,
        enoexec_daemon_rules(),
    ));
    objects.extend(rbac_pair(
        settings,
        ENOEXEC_DAEMON,
        "ClusterRole",
        ENOEXEC_DAEMON,
        enoexec_daemon_cluster_rules(),
    ));
    objects
}

/// The DaemonSet, a headless Service for its metrics and its network policy.
pub fn enoexec_daemon_workload(settings: &Settings) -> Result<Vec<Value>, FlagsError> {
    let component = EnoexecDaemonArgs::SUBCOMMAND;
    let mut metrics = service(
        settings,
        ENOEXEC_DAEMON,
        component,
        json!([{"name": "metrics", "port": OPS_PORT, "targetPort": "metrics"}]),
    );
    metrics["spec"]["clusterIP"] = json!("None");
    Ok(vec![
        enoexec_daemon_set(settings)?,
        metrics,
        network_policy(
            settings,
            ENOEXEC_DAEMON,
            component,
            json!([open_port(OPS_PORT)]),
        ),
    ])
}

pub fn enoexec_handler_access(settings: &Settings) -> Vec<Value> {
    let lease = format!("{ENOEXEC_HANDLER}-lease");
    let mut objects = vec![service_account(settings, ENOEXEC_HANDLER)];
    objects.extend(rbac_pair(
        settings,
        ENOEXEC_HANDLER,
        "ClusterRole",
        ENOEXEC_HANDLER,
        enoexec_handler_cluster_rules(),
    ));
    objects.extend(rbac_pair(
        settings,
        &lease,
        "Role",
        ENOEXEC_HANDLER,
        enoexec_handler_namespace_rules(),
    ));
    objects
}

pub fn enoexec_handler_workload(settings: &Settings) -> Result<Vec<Value>, FlagsError> {
    inspector_client_controller::<EnoexecHandlerArgs>(settings, ENOEXEC_HANDLER)
}

/// BPF and PERFMON always; SYS_RESOURCE (RLIMIT_MEMLOCK, kernels before 5.11) when asked:
/// later kernels ignore the limit, and a host without it in its bounding set (rootless or
/// nested runtimes) cannot start a container that asks for it.
fn daemon_capabilities(settings: &Settings) -> Vec<&'static str> {
    let mut capabilities = vec!["BPF", "PERFMON"];
    if settings.enoexec_daemon_sys_resource {
        capabilities.push("SYS_RESOURCE");
    }
    capabilities
}

/// The daemon's runtime endpoint, volume and mount, when the settings name a socket.
fn runtime_socket(settings: &Settings) -> Option<(String, Value, Value)> {
    let socket = settings.enoexec_daemon_runtime_socket.as_ref()?;
    let directory = socket.parent()?.to_str()?;
    let file = socket.file_name()?.to_str()?;
    Some((
        format!("unix://{HOST_RUNTIME}/{file}"),
        json!({"name": "host-runtime", "hostPath": {"path": directory, "type": "Directory"}}),
        json!({"name": "host-runtime", "mountPath": HOST_RUNTIME, "readOnly": true}),
    ))
}

fn enoexec_daemon_set(settings: &Settings) -> Result<Value, FlagsError> {
    let component = EnoexecDaemonArgs::SUBCOMMAND;
    let socket = runtime_socket(settings);
    // The node's name has no default: the kubelet puts the downward API's into the argv.
    let node = parse_argv(&[component, "--node-name=$(NODE_NAME)"])?;
    let args = role_args::<EnoexecDaemonArgs>(node, &["metrics_addr"], |flags| {
        flags.cgroup_root = Some(HOST_CGROUP.into());
        flags.ops.metrics_addr = all_interfaces(OPS_PORT);
        flags.runtime_endpoint = socket.as_ref().map(|(endpoint, ..)| endpoint.clone());
    })?;
    let mut daemon_set = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": ENOEXEC_DAEMON, "namespace": settings.namespace, "labels": labels(component)},
        "spec": {
            "selector": {"matchLabels": labels(component)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": labels(component)},
                "spec": {
                    "serviceAccountName": ENOEXEC_DAEMON,
                    "schedulerName": "default-scheduler",
                    "priorityClassName": "system-node-critical",
                    // /proc/PID/cgroup of every container's processes.
                    "hostPID": true,
                    "affinity": {"nodeAffinity": settings.node_affinity()},
                    // Every node runs pods, tainted ones included.
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": component,
                        "image": settings.image,
                        "args": args,
                        "env": [
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        ],
                        "ports": [{"name": "metrics", "containerPort": OPS_PORT}],
                        "livenessProbe": liveness_probe("metrics"),
                        "readinessProbe": readiness_probe("metrics"),
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                        "securityContext": {
                            // Root for the runtime socket; capabilities instead of privileged:
                            // BPF and PERFMON load and attach the tracepoint program.
                            "runAsUser": 0,
                            "runAsNonRoot": false,
                            "privileged": false,
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"], "add": daemon_capabilities(settings)},
                            // The runtimes' default seccomp profiles allow bpf(2) and
                            // perf_event_open(2) only with CAP_SYS_ADMIN.
                            "seccompProfile": {"type": "Unconfined"},
                        },
                        "volumeMounts": [
                            {"name": "tracefs", "mountPath": "/sys/kernel/tracing", "readOnly": true},
                            {"name": "host-run", "mountPath": HOST_RUN, "readOnly": true},
                            {"name": "host-cgroup", "mountPath": HOST_CGROUP, "readOnly": true},
                        ],
                    }],
                    "volumes": [
                        {"name": "tracefs", "hostPath": {"path": "/sys/kernel/tracing", "type": "Directory"}},
                        {"name": "host-run", "hostPath": {"path": "/run", "type": "Directory"}},
                        {"name": "host-cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}},
                    ],
                },
            },
        },
    });
    // Containers' logs, at the path the runtime gives (read when one exits with 127).
    let logs = settings.enoexec_daemon_pod_logs_dir.to_string_lossy();
    let pod = &mut daemon_set["spec"]["template"]["spec"];
    if let Some(mounts) = pod["containers"][0]["volumeMounts"].as_array_mut() {
        mounts.push(json!({"name": "host-pod-logs", "mountPath": logs, "readOnly": true}));
    }
    if let Some(volumes) = pod["volumes"].as_array_mut() {
        volumes.push(json!({"name": "host-pod-logs", "hostPath": {"path": logs, "type": "DirectoryOrCreate"}}));
    }
    if let Some((_, volume, mount)) = socket {
        let pod = &mut daemon_set["spec"]["template"]["spec"];
        if let Some(mounts) = pod["containers"][0]["volumeMounts"].as_array_mut() {
            mounts.push(mount);
        }
        if let Some(volumes) = pod["volumes"].as_array_mut() {
            volumes.push(volume);
        }
    }
    if !settings.image_pull_secrets.is_empty() {
        daemon_set["spec"]["template"]["spec"]["imagePullSecrets"] = settings
            .image_pull_secrets
            .iter()
            .map(|name| json!({"name": name}))
            .collect();
    }
    Ok(daemon_set)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn capabilities(settings: &Settings) -> Value {
        enoexec_daemon_set(settings).unwrap()["spec"]["template"]["spec"]["containers"][0]["securityContext"]
            ["capabilities"]
            .clone()
    }

    #[test]
    fn a_runtime_socket_elsewhere_is_mounted_by_its_directory() {
        let mut settings = Settings::default();
        let pod = |s: &Settings| enoexec_daemon_set(s).unwrap()["spec"]["template"]["spec"].clone();
        let default = pod(&settings);
        assert!(
            !default["containers"][0]["args"]
                .to_string()
                .contains("--runtime-endpoint")
        );
        settings.enoexec_daemon_runtime_socket = Some(PathBuf::from(
            "/var/snap/microk8s/common/run/containerd.sock",
        ));
        let pod = pod(&settings);
        let container = &pod["containers"][0];
        assert!(container["args"].as_array().unwrap().contains(&json!(
            "--runtime-endpoint=unix:///host/runtime/containerd.sock"
        )));
        assert!(container["volumeMounts"].as_array().unwrap().contains(
            &json!({"name": "host-runtime", "mountPath": "/host/runtime", "readOnly": true})
        ));
        assert!(pod["volumes"].as_array().unwrap().contains(&json!(
            {"name": "host-runtime", "hostPath": {"path": "/var/snap/microk8s/common/run", "type": "Directory"}}
        )));
    }

    #[test]
    fn the_pod_log_directory_is_mounted_read_only_at_its_own_path() {
        let mut settings = Settings::default();
        let mounted = |s: &Settings| {
            let pod = enoexec_daemon_set(s).unwrap()["spec"]["template"]["spec"].clone();
            (
                pod["containers"][0]["volumeMounts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|m| m["name"] == "host-pod-logs")
                    .cloned(),
                pod["volumes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|v| v["name"] == "host-pod-logs")
                    .cloned(),
            )
        };
        assert_eq!(
            mounted(&settings),
            (
                Some(
                    json!({"name": "host-pod-logs", "mountPath": "/var/log/pods", "readOnly": true})
                ),
                Some(
                    json!({"name": "host-pod-logs", "hostPath": {"path": "/var/log/pods", "type": "DirectoryOrCreate"}})
                )
            )
        );
        settings.enoexec_daemon_pod_logs_dir = PathBuf::from("/data/kubelet/pod-logs");
        assert_eq!(
            mounted(&settings).0,
            Some(
                json!({"name": "host-pod-logs", "mountPath": "/data/kubelet/pod-logs", "readOnly": true})
            )
        );
    }

    #[test]
    fn the_daemon_gets_sys_resource_only_when_asked() {
        let mut settings = Settings::default();
        assert_eq!(
            capabilities(&settings),
            json!({"drop": ["ALL"], "add": ["BPF", "PERFMON"]})
        );
        settings.enoexec_daemon_sys_resource = true;
        assert_eq!(
            capabilities(&settings),
            json!({"drop": ["ALL"], "add": ["BPF", "PERFMON", "SYS_RESOURCE"]})
        );
    }
}
