//! The install manifests of `manifests/scheduler/`, generated here so that RBAC follows
//! the code; `multiarch manifests --dir manifests` writes them and a test fails when the
//! checked-in files drift.
//!
//! The scheduler reads no Secrets: image inspection runs in `multiarch inspector`, the
//! only component with `get` on Secrets and ServiceAccounts.

use serde_json::{Value, json};

pub const NAMESPACE: &str = "multiarch";
pub const IMAGE: &str = "multiarch:0.1.0";
const SCHEDULER: &str = "multiarch-scheduler";
const INSPECTOR: &str = "multiarch-inspector";

fn labels(component: &str) -> Value {
    json!({"app.kubernetes.io/name": "multiarch", "app.kubernetes.io/component": component})
}

fn security_context() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "runAsUser": 65532,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

fn deployment(
    name: &str,
    component: &str,
    args: Value,
    ports: Value,
    probe_port: &str,
    env: Value,
) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels(component)},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels(component)},
            "template": {
                "metadata": {"labels": labels(component)},
                "spec": {
                    "serviceAccountName": name,
                    // Scheduled by the default scheduler: the scheduler must not depend on itself.
                    "schedulerName": "default-scheduler",
                    "priorityClassName": "system-cluster-critical",
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "containers": [{
                        "name": component,
                        "image": IMAGE,
                        "args": args,
                        "env": env,
                        "ports": ports,
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": probe_port}, "initialDelaySeconds": 5, "periodSeconds": 10},
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": probe_port}, "periodSeconds": 5},
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                        "securityContext": security_context(),
                    }],
                },
            },
        },
    })
}

/// The folder's kustomization: its files, and the image every role runs.
fn kustomization(resources: &[&str]) -> Value {
    json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": resources,
        "images": [{"name": "multiarch", "newName": "multiarch", "newTag": "0.1.0"}],
    })
}

fn downward_env() -> Value {
    json!([
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ])
}

/// `(file name, documents)` of `manifests/scheduler/`, in apply order.
pub fn scheduler() -> Vec<(&'static str, Vec<Value>)> {
    let scheduler_rules = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]},
    ]);
    let inspector_rules = json!([
        {"apiGroups": [""], "resources": ["secrets", "serviceaccounts"], "verbs": ["get"]},
    ]);
    let scheduler_args = json!([
        "scheduler",
        "--scheduler-name=multiarch-scheduler",
        format!("--inspector-endpoint=http://{INSPECTOR}.{NAMESPACE}.svc:9443"),
        "--metrics-addr=0.0.0.0:10259",
        "--log-format=json",
    ]);
    let inspector_args = json!([
        "inspector",
        "--listen=0.0.0.0:9443",
        "--metrics-addr=0.0.0.0:8080",
        "--log-format=json"
    ]);
    vec![
        (
            "namespace.yaml",
            vec![json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": {"multiarch.openshift.io/exclude-pod-placement": "true"}},
            })],
        ),
        (
            "rbac.yaml",
            vec![
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SCHEDULER, "namespace": NAMESPACE}}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SCHEDULER}, "rules": scheduler_rules}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": SCHEDULER},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SCHEDULER},
                   "subjects": [{"kind": "ServiceAccount", "name": SCHEDULER, "namespace": NAMESPACE}]}),
                // The Lease lives in multiarch's namespace only, and only the scheduler's.
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": format!("{SCHEDULER}-lease"), "namespace": NAMESPACE},
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [SCHEDULER], "verbs": ["get", "update"]},
                ]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": format!("{SCHEDULER}-lease"), "namespace": NAMESPACE},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{SCHEDULER}-lease")},
                   "subjects": [{"kind": "ServiceAccount", "name": SCHEDULER, "namespace": NAMESPACE}]}),
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": INSPECTOR, "namespace": NAMESPACE}}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": INSPECTOR}, "rules": inspector_rules}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": INSPECTOR},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": INSPECTOR},
                   "subjects": [{"kind": "ServiceAccount", "name": INSPECTOR, "namespace": NAMESPACE}]}),
            ],
        ),
        (
            "inspector.yaml",
            vec![
                deployment(
                    INSPECTOR,
                    "inspector",
                    inspector_args,
                    json!([{"name": "grpc", "containerPort": 9443}, {"name": "metrics", "containerPort": 8080}]),
                    "metrics",
                    json!([]),
                ),
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": INSPECTOR, "namespace": NAMESPACE, "labels": labels("inspector")},
                   "spec": {"selector": labels("inspector"), "ports": [{"name": "grpc", "port": 9443, "targetPort": "grpc", "appProtocol": "grpc"}, {"name": "metrics", "port": 8080, "targetPort": "metrics"}]}}),
            ],
        ),
        (
            "scheduler.yaml",
            vec![deployment(
                SCHEDULER,
                "scheduler",
                scheduler_args,
                json!([{"name": "metrics", "containerPort": 10259}]),
                "metrics",
                downward_env(),
            )],
        ),
        (
            "kustomization.yaml",
            vec![kustomization(&[
                "../crds",
                "namespace.yaml",
                "rbac.yaml",
                "inspector.yaml",
                "scheduler.yaml",
            ])],
        ),
    ]
}

const WEBHOOK: &str = "multiarch-webhook";

/// `(file name, documents)` of `manifests/webhook/`. The TLS Secret `multiarch-webhook-tls`
/// (keys `tls.crt`, `tls.key`) and the `caBundle` of the MutatingWebhookConfiguration are
/// the installer's (cert-manager's, or the coming operator's); the certificate is
/// reloaded when the Secret changes.
pub fn webhook() -> Vec<(&'static str, Vec<Value>)> {
    let mut deployment = deployment(
        WEBHOOK,
        "webhook",
        json!([
            "webhook",
            "--listen=0.0.0.0:9443",
            "--cert=/etc/multiarch/tls/tls.crt",
            "--key=/etc/multiarch/tls/tls.key",
            "--log-format=json"
        ]),
        json!([{"name": "https", "containerPort": 9443}]),
        "https",
        downward_env(),
    );
    let pod = &mut deployment["spec"]["template"]["spec"];
    pod["volumes"] = json!([{"name": "tls", "secret": {"secretName": "multiarch-webhook-tls"}}]);
    pod["containers"][0]["volumeMounts"] =
        json!([{"name": "tls", "mountPath": "/etc/multiarch/tls", "readOnly": true}]);
    // The probes speak HTTPS on the same port.
    for probe in ["livenessProbe", "readinessProbe"] {
        pod["containers"][0][probe]["httpGet"]["scheme"] = json!("HTTPS");
    }
    vec![
        (
            "rbac.yaml",
            vec![
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": WEBHOOK, "namespace": NAMESPACE}}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": WEBHOOK},
                   "rules": [{"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]}]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": WEBHOOK},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": WEBHOOK},
                   "subjects": [{"kind": "ServiceAccount", "name": WEBHOOK, "namespace": NAMESPACE}]}),
            ],
        ),
        (
            "webhook.yaml",
            vec![
                deployment,
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": WEBHOOK, "namespace": NAMESPACE, "labels": labels("webhook")},
                   "spec": {"selector": labels("webhook"), "ports": [{"name": "https", "port": 443, "targetPort": "https"}]}}),
            ],
        ),
        (
            "mutatingwebhookconfiguration.yaml",
            vec![json!({
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": WEBHOOK, "labels": labels("webhook")},
                "webhooks": [{
                    "name": "pods.multiarch.openshift.io",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"service": {"name": WEBHOOK, "namespace": NAMESPACE, "path": "/mutate-pods", "port": 443}, "caBundle": "REPLACE_WITH_BASE64_CA"},
                    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Namespaced"}],
                    // Fail open: a pod is never blocked because the webhook is down.
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "timeoutSeconds": 5,
                    "reinvocationPolicy": "Never",
                    "matchPolicy": "Equivalent",
                    // From the ClusterPodPlacementConfig's namespaceSelector; system and multiarch's
                    // own namespaces are always left out.
                    "namespaceSelector": {"matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kube-public", "kube-node-lease", NAMESPACE]},
                        {"key": "multiarch.openshift.io/exclude-pod-placement", "operator": "DoesNotExist"},
                    ]},
                    "objectSelector": {"matchExpressions": [
                        {"key": multiarch_crd::names::OPT_OUT_LABEL, "operator": "NotIn", "values": [multiarch_crd::names::OPT_OUT_VALUE]},
                    ]},
                }],
            })],
        ),
        (
            "kustomization.yaml",
            vec![kustomization(&[
                "rbac.yaml",
                "webhook.yaml",
                "mutatingwebhookconfiguration.yaml",
            ])],
        ),
    ]
}

const GATE: &str = "multiarch-gate-controller";

/// `(file name, documents)` of `manifests/gate-controller/` (gate mode only).
pub fn gate_controller() -> Vec<(&'static str, Vec<Value>)> {
    let rules = json!([
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "update"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs", "podplacementconfigs"], "verbs": ["get", "list", "watch"]},
    ]);
    vec![
        (
            "rbac.yaml",
            vec![
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": GATE, "namespace": NAMESPACE}}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": GATE}, "rules": rules}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": GATE},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": GATE},
                   "subjects": [{"kind": "ServiceAccount", "name": GATE, "namespace": NAMESPACE}]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": format!("{GATE}-lease"), "namespace": NAMESPACE},
                "rules": [
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [GATE], "verbs": ["get", "update"]},
                ]}),
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": format!("{GATE}-lease"), "namespace": NAMESPACE},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("{GATE}-lease")},
                   "subjects": [{"kind": "ServiceAccount", "name": GATE, "namespace": NAMESPACE}]}),
            ],
        ),
        (
            "gate-controller.yaml",
            vec![deployment(
                GATE,
                "gate-controller",
                json!([
                    "gate-controller",
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
            vec![kustomization(&["rbac.yaml", "gate-controller.yaml"])],
        ),
    ]
}

const ENOEXEC_DAEMON: &str = "multiarch-enoexec-daemon";
const ENOEXEC_HANDLER: &str = "multiarch-enoexec-handler";

/// The host's `/run` inside the daemon: containerd's and CRI-O's sockets are under it, and
/// mounting the directory (not one socket) lets one DaemonSet serve both runtimes.
pub const HOST_RUN: &str = "/host/run";
/// The host's cgroup hierarchy inside the daemon, to find a container by cgroup id after its
/// process is gone (the daemon's own /sys/fs/cgroup is its cgroup namespace's view).
pub const HOST_CGROUP: &str = "/host/sys/fs/cgroup";

/// A Role (or ClusterRole, without a namespace) and its binding to `account`.
fn rbac_pair(
    name: &str,
    kind: &str,
    namespace: Option<&str>,
    account: &str,
    rules: Value,
) -> [Value; 2] {
    let mut metadata = json!({"name": name});
    let mut binding_kind = format!("{kind}Binding");
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    } else {
        binding_kind = "ClusterRoleBinding".into();
    }
    [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding_kind, "metadata": metadata,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]}),
    ]
}

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
pub fn enoexec() -> Vec<(&'static str, Vec<Value>)> {
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

/// A file's YAML: documents separated by `---`.
pub fn to_yaml(documents: &[Value]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for (i, doc) in documents.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&serde_yaml_ng::to_string(doc)?);
    }
    Ok(out)
}
