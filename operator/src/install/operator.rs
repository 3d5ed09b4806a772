//! The operator's own install (`manifests/operator/`, what `kubectl apply -k manifests/`
//! installs with the CRDs): its namespace, RBAC, Deployment and Service, the webhooks it
//! serves (CRD conversion; validation of deletes and priorities), and the admission
//! policy that keeps a PodPlacementConfig from existing without the
//! ClusterPodPlacementConfig.

use multiarch_crd::names::{NODE_VARIANT_LABEL, OPERATOR_SERVICE, SINGLETON_NAME};
use multiarch_flags::{FlagsError, OperatorArgs, RoleFlags, defaults};
use serde_json::{Value, json};

use super::{
    ENOEXEC_DAEMON, ENOEXEC_HANDLER, GATE_CONTROLLER, INSPECTOR, SCHEDULER, Settings, WEBHOOK,
    labels, lease_rules, rbac_pair, service_account,
    workload::{
        OPS_PORT, Workload, all_interfaces, api_server_port, disruption_budget, downward_env,
        network_policy, open_port, pod_spec, role_args, service,
    },
};

pub const OPERATOR: &str = OPERATOR_SERVICE;
/// The Secret with multiarch's CA (`tls.crt`, `tls.key`, `ca-bundle.crt`).
pub const CA_SECRET: &str = "multiarch-ca";
/// The Secret with the operator's own serving certificate.
pub const OPERATOR_TLS_SECRET: &str = "multiarch-operator-tls";
/// The ValidatingWebhookConfiguration the operator serves.
pub const VALIDATING_WEBHOOK: &str = "multiarch-operator";
pub const VALIDATE_CPPC_PATH: &str = "/validate/clusterpodplacementconfigs";
pub const VALIDATE_PPC_PATH: &str = "/validate/podplacementconfigs";
/// The admission policy (and binding) that refuses a PodPlacementConfig without the
/// ClusterPodPlacementConfig: its names are what a refused user reads.
pub const PPC_NEEDS_CPPC_POLICY: &str = "podplacementconfig-requires-clusterpodplacementconfig";
pub const PPC_NEEDS_CPPC_BINDING: &str = "create-the-clusterpodplacementconfig-cluster-first";
/// The admission policy (and binding) that lets the exec-format-error daemon change one
/// label of one node: the variant label of the node it runs on.
pub const ENOEXEC_DAEMON_NODE_POLICY: &str = "multiarch-enoexec-daemon-labels-its-own-node";
const PORT: u16 = 9443;

/// The roles whose rules the operator grants: it may create and bind them without
/// holding every permission in them itself (`escalate`, `bind`), and nothing else.
fn operand_cluster_roles() -> Value {
    json!([
        SCHEDULER,
        INSPECTOR,
        WEBHOOK,
        GATE_CONTROLLER,
        ENOEXEC_HANDLER,
        ENOEXEC_DAEMON
    ])
}

fn operand_roles() -> Value {
    json!([
        format!("{SCHEDULER}-lease"),
        format!("{GATE_CONTROLLER}-lease"),
        format!("{ENOEXEC_HANDLER}-lease"),
        ENOEXEC_DAEMON,
    ])
}

/// What the operator calls cluster-wide (the tests check every request it makes).
pub fn operator_cluster_rules() -> Value {
    json!([
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs"], "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs/status"], "verbs": ["get", "patch", "update"]},
        // Owner references that block the owner's deletion need this.
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["clusterpodplacementconfigs/finalizers"], "verbs": ["update"]},
        {"apiGroups": ["multiarch.openshift.io"], "resources": ["podplacementconfigs"], "verbs": ["get", "list", "watch"]},
        // The cluster's architectures.
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        // Uninstall and mode switches: ungate, or recreate pods left for a scheduler
        // that goes away; its own pod's image.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        // Whether a scheduler name is another scheduler's: its Scheduled events.
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
        // The CA bundle of the conversion webhook; whether ServiceMonitors exist.
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": ["clusterpodplacementconfigs.multiarch.openshift.io"], "verbs": ["patch", "update"]},
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"], "verbs": ["get", "list", "watch", "create"]},
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"], "resourceNames": [WEBHOOK], "verbs": ["patch", "update", "delete"]},
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "resourceNames": [VALIDATING_WEBHOOK], "verbs": ["patch", "update"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "clusterrolebindings"], "verbs": ["get", "list", "watch", "create"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles", "clusterrolebindings"], "resourceNames": operand_cluster_roles(), "verbs": ["patch", "update", "delete"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": operand_cluster_roles(), "verbs": ["escalate", "bind"]},
    ])
}

/// What the operator calls in its own namespace.
pub fn operator_namespace_rules() -> Value {
    let mut rules = vec![
        json!({"apiGroups": ["apps"], "resources": ["deployments", "daemonsets"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}),
        json!({"apiGroups": [""], "resources": ["services", "serviceaccounts", "secrets"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}),
        // The journal of pods being recreated (`drain`).
        json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "delete"]}),
        json!({"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}),
        json!({"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}),
        json!({"apiGroups": ["monitoring.coreos.com"], "resources": ["servicemonitors", "prometheusrules"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]}),
        json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["get", "list", "watch", "create"]}),
        json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "resourceNames": operand_roles(), "verbs": ["patch", "update", "delete"]}),
        json!({"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "resourceNames": operand_roles(), "verbs": ["escalate", "bind"]}),
        // The exec-format-error monitor's reports, cleared when it is turned off.
        json!({"apiGroups": ["multiarch.openshift.io"], "resources": ["enoexecevents"], "verbs": ["list", "watch", "delete"]}),
    ];
    rules.extend(lease_rules(OPERATOR));
    Value::Array(rules)
}

fn namespace(settings: &Settings) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": settings.namespace, "labels": {
            "multiarch.openshift.io/exclude-pod-placement": "true",
            // The exec-format-error daemon needs hostPID, host paths and the BPF
            // capabilities: the privileged Pod Security level, as MTO's namespace has.
            "pod-security.kubernetes.io/enforce": "privileged",
            "pod-security.kubernetes.io/audit": "privileged",
            "pod-security.kubernetes.io/warn": "privileged",
        }},
    })
}

fn rbac(settings: &Settings) -> Vec<Value> {
    let mut objects = vec![service_account(settings, OPERATOR)];
    objects.extend(rbac_pair(
        settings,
        OPERATOR,
        "ClusterRole",
        OPERATOR,
        operator_cluster_rules(),
    ));
    objects.extend(rbac_pair(
        settings,
        OPERATOR,
        "Role",
        OPERATOR,
        operator_namespace_rules(),
    ));
    objects
}

/// Two replicas (one leads; both serve the webhooks), preferring the control plane.
fn deployment(settings: &Settings) -> Result<Value, FlagsError> {
    let component = OperatorArgs::SUBCOMMAND;
    let args = role_args(
        defaults::<OperatorArgs>()?,
        &["listen", "metrics_addr"],
        |flags| {
            flags.listen = all_interfaces(PORT);
            flags.ops.metrics_addr = all_interfaces(OPS_PORT);
        },
    )?;
    let workload = Workload {
        name: OPERATOR,
        component,
        args,
        ports: json!([{"name": "https", "containerPort": PORT}, {"name": "metrics", "containerPort": OPS_PORT}]),
        probe_port: "metrics",
        env: downward_env(),
    };
    let mut pod = pod_spec(settings, &workload);
    pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json!([
        {"weight": 100, "preference": {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}},
    ]);
    pod["tolerations"] = json!([
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
    ]);
    Ok(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": OPERATOR, "namespace": settings.namespace, "labels": labels(component)},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels(component)},
            "template": {"metadata": {"labels": labels(component)}, "spec": pod},
        },
    }))
}

fn workload(settings: &Settings) -> Result<Vec<Value>, FlagsError> {
    let component = OperatorArgs::SUBCOMMAND;
    Ok(vec![
        deployment(settings)?,
        service(
            settings,
            OPERATOR,
            component,
            json!([{"name": "https", "port": 443, "targetPort": "https"}, {"name": "metrics", "port": OPS_PORT, "targetPort": "metrics"}]),
        ),
        disruption_budget(settings, OPERATOR, component),
        network_policy(
            settings,
            OPERATOR,
            component,
            json!([api_server_port(settings, PORT), open_port(OPS_PORT)]),
        ),
    ])
}

/// The validating webhooks the operator serves, without the CA bundle (the operator
/// writes it): a ClusterPodPlacementConfig is not deleted while PodPlacementConfigs
/// exist (failing open: the deletion then waits in the finalizer instead), and
/// PodPlacementConfig priorities are unique per namespace (failing closed, as MTO).
pub fn validating_webhook_configuration(settings: &Settings) -> Value {
    let hook = |name: &str,
                path: &str,
                operations: Value,
                resource: &str,
                scope: &str,
                failure: &str| {
        json!({
            "name": name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"name": OPERATOR, "namespace": settings.namespace, "path": path, "port": 443}},
            "rules": [{"apiGroups": ["multiarch.openshift.io"], "apiVersions": ["*"], "operations": operations, "resources": [resource], "scope": scope}],
            "failurePolicy": failure,
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "matchPolicy": "Equivalent",
        })
    };
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": VALIDATING_WEBHOOK, "labels": labels("operator")},
        "webhooks": [
            hook("clusterpodplacementconfigs.multiarch.openshift.io", VALIDATE_CPPC_PATH, json!(["CREATE", "UPDATE", "DELETE"]), "clusterpodplacementconfigs", "Cluster", "Ignore"),
            hook("podplacementconfigs.multiarch.openshift.io", VALIDATE_PPC_PATH, json!(["CREATE", "UPDATE"]), "podplacementconfigs", "Namespaced", "Fail"),
        ],
    })
}

/// A PodPlacementConfig needs the ClusterPodPlacementConfig (its parameter): missing, the
/// create is refused naming the binding; being deleted, with the message.
fn admission_policy() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": PPC_NEEDS_CPPC_POLICY, "labels": labels("operator")},
            "spec": {
                "failurePolicy": "Fail",
                "paramKind": {"apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig"},
                "matchConstraints": {"resourceRules": [{"apiGroups": ["multiarch.openshift.io"], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["podplacementconfigs"]}]},
                "validations": [{
                    "expression": "!has(params.metadata.deletionTimestamp)",
                    "message": "the ClusterPodPlacementConfig 'cluster' is being deleted: create PodPlacementConfigs again once it is recreated",
                    "reason": "Forbidden",
                }],
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": PPC_NEEDS_CPPC_BINDING, "labels": labels("operator")},
            "spec": {
                "policyName": PPC_NEEDS_CPPC_POLICY,
                "validationActions": ["Deny"],
                "paramRef": {"name": SINGLETON_NAME, "parameterNotFoundAction": "Deny"},
            },
        }),
    ]
}

/// The exec-format-error daemon's ServiceAccount may write nodes (RBAC has no "its own
/// node"), so this policy holds each daemon to the node its token is bound to (the API
/// server puts the pod's node in the token's `authentication.kubernetes.io/node-name`)
/// and to the one label it owns, with a level as its value: a compromised node cannot
/// relabel, taint or cordon another, nor change its own node's other fields.
fn enoexec_daemon_node_policy(settings: &Settings) -> Vec<Value> {
    let account = format!(
        "system:serviceaccount:{}:{ENOEXEC_DAEMON}",
        settings.namespace
    );
    let unchanged_but = |variable: &str, other: &str| {
        format!(
            "variables.{variable}.all(k, k == '{NODE_VARIANT_LABEL}' || (k in variables.{other} && variables.{other}[k] == variables.{variable}[k]))"
        )
    };
    vec![
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": ENOEXEC_DAEMON_NODE_POLICY, "labels": labels("operator")},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}]},
                "matchConditions": [{"name": "from-the-enoexec-daemon", "expression": format!("request.userInfo.username == '{account}'")}],
                "variables": [
                    {"name": "labels", "expression": "has(object.metadata.labels) ? object.metadata.labels : {}"},
                    {"name": "oldLabels", "expression": "has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"},
                ],
                "validations": [
                    {
                        "expression": "has(request.userInfo.extra) && 'authentication.kubernetes.io/node-name' in request.userInfo.extra && request.userInfo.extra['authentication.kubernetes.io/node-name'].exists(n, n == object.metadata.name)",
                        "message": format!("{ENOEXEC_DAEMON} may label only the node it runs on"),
                        "reason": "Forbidden",
                    },
                    {
                        "expression": format!(
                            "{} && {} && object.spec == oldObject.spec && (has(object.metadata.annotations) ? object.metadata.annotations : {{}}) == (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {{}})",
                            unchanged_but("labels", "oldLabels"),
                            unchanged_but("oldLabels", "labels"),
                        ),
                        "message": format!("{ENOEXEC_DAEMON} may change only the label {NODE_VARIANT_LABEL} of its node"),
                        "reason": "Forbidden",
                    },
                    {
                        "expression": format!("!('{NODE_VARIANT_LABEL}' in variables.labels) || variables.labels['{NODE_VARIANT_LABEL}'] in ['v1', 'v2', 'v3', 'v4']"),
                        "message": format!("{ENOEXEC_DAEMON} may set {NODE_VARIANT_LABEL} only to an x86-64 level (v1 to v4)"),
                        "reason": "Invalid",
                    },
                ],
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": ENOEXEC_DAEMON_NODE_POLICY, "labels": labels("operator")},
            "spec": {"policyName": ENOEXEC_DAEMON_NODE_POLICY, "validationActions": ["Deny"]},
        }),
    ]
}

/// `(file name, documents)` of `manifests/operator/`.
pub fn operator(settings: &Settings) -> Result<super::Files, FlagsError> {
    Ok(vec![
        ("namespace.yaml", vec![namespace(settings)]),
        ("rbac.yaml", rbac(settings)),
        ("operator.yaml", workload(settings)?),
        (
            "admission.yaml",
            [
                vec![validating_webhook_configuration(settings)],
                admission_policy(),
                enoexec_daemon_node_policy(settings),
            ]
            .concat(),
        ),
        (
            "kustomization.yaml",
            vec![super::kustomization(&[
                "../crds",
                "namespace.yaml",
                "rbac.yaml",
                "operator.yaml",
                "admission.yaml",
            ])],
        ),
    ])
}

/// The operator's serving certificate's names: its Service, as the API server calls it.
pub fn operator_dns_names(settings: &Settings) -> Vec<String> {
    dns_names(OPERATOR, &settings.namespace)
}

/// The webhook's serving certificate's names.
pub fn webhook_dns_names(settings: &Settings) -> Vec<String> {
    dns_names(WEBHOOK, &settings.namespace)
}

pub(super) fn dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}
