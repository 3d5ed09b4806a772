//! `manifests/enoexec/`: the exec-format-error daemon on every node and its handler.

use serde_json::{Value, json};

use super::{
    Files, IMAGE, INSPECTOR, NAMESPACE, deployment, downward_env, kustomization, labels, rbac_pair,
};

const ENOEXEC_DAEMON: &str = "multiarch-enoexec-daemon";
const ENOEXEC_HANDLER: &str = "multiarch-enoexec-handler";

/// The host's `/run` inside the daemon: containerd's and CRI-O's sockets are under it, and
/// mounting the directory (not one socket) lets one DaemonSet serve both runtimes.
pub const HOST_RUN: &str = "/host/run";
/// The host's cgroup hierarchy inside the daemon, to find a container by cgroup id after its
/// process is gone (the daemon's own /sys/fs/cgroup is its cgroup namespace's view).
pub const HOST_CGROUP: &str = "/host/sys/fs/cgroup";

/// What `multiarch enoexec-daemon` calls: it only writes ENoExecEvents in multiarch's namespace.
pub fn enoexec_daemon_rules() -> Value {
    json!([
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents"], "verbs": ["create", "delete"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents/status"], "verbs": ["patch"]},
    ])
}

/// What `multiarch enoexec-handler` calls cluster-wide.
pub fn enoexec_handler_cluster_rules() -> Value {
    json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ])
}

/// What `multiarch enoexec-handler` calls in multiarch's namespace.
pub fn enoexec_handler_namespace_rules() -> Value {
    json!([
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [ENOEXEC_HANDLER], "verbs": ["get", "update"]},
    ])
}

fn enoexec_daemon_set() -> Value {
    let component = "enoexec-daemon";
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": ENOEXEC_DAEMON, "namespace": NAMESPACE, "labels": labels(component)},
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
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    // Every node runs pods, tainted ones included.
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": component,
                        "image": IMAGE,
                        "args": [
                            "enoexec-daemon",
                            format!("--cgroup-root={HOST_CGROUP}"),
                            "--metrics-addr=0.0.0.0:8080",
                            "--log-format=json",
                        ],
                        "env": [
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        ],
                        "ports": [{"name": "metrics", "containerPort": 8080}],
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "metrics"}, "initialDelaySeconds": 5, "periodSeconds": 10},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
                        "securityContext": {
                            // Root for the runtime socket; capabilities instead of privileged:
                            // BPF and PERFMON load and attach the tracepoint program,
                            // SYS_RESOURCE lifts RLIMIT_MEMLOCK on kernels before 5.11.
                            "runAsUser": 0,
                            "runAsNonRoot": false,
                            "privileged": false,
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"], "add": ["BPF", "PERFMON", "SYS_RESOURCE"]},
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
    })
}

/// `(file name, documents)` of `manifests/enoexec/`: the node daemon and the handler.
pub fn enoexec() -> Files {
    let lease = format!("{ENOEXEC_HANDLER}-lease");
    let mut rbac = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ENOEXEC_DAEMON, "namespace": NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ENOEXEC_HANDLER, "namespace": NAMESPACE}}),
    ];
    rbac.extend(rbac_pair(
        ENOEXEC_DAEMON,
        "Role",
        Some(NAMESPACE),
        ENOEXEC_DAEMON,
        enoexec_daemon_rules(),
    ));
    rbac.extend(rbac_pair(
        ENOEXEC_HANDLER,
        "ClusterRole",
        None,
        ENOEXEC_HANDLER,
        enoexec_handler_cluster_rules(),
    ));
    rbac.extend(rbac_pair(
        &lease,
        "Role",
        Some(NAMESPACE),
        ENOEXEC_HANDLER,
        enoexec_handler_namespace_rules(),
    ));
    vec![
        ("rbac.yaml", rbac),
        ("daemon.yaml", vec![enoexec_daemon_set()]),
        (
            "handler.yaml",
            vec![deployment(
                ENOEXEC_HANDLER,
                "enoexec-handler",
                json!([
                    "enoexec-handler",
                    format!("--inspector-endpoint=http://{INSPECTOR}.{NAMESPACE}.svc:9443"),
                    "--metrics-addr=0.0.0.0:8080",
                    "--log-format=json"
                ]),
                json!([{"name": "metrics", "containerPort": 8080}]),
                "metrics",
                downward_env(),
            )],
        ),
        (
            "kustomization.yaml",
            vec![kustomization(&["rbac.yaml", "daemon.yaml", "handler.yaml"])],
        ),
    ]
}
