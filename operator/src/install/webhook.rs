//! `manifests/webhook/`: the admission webhook and its MutatingWebhookConfiguration.

use serde_json::json;

use super::{Files, INSPECTOR, NAMESPACE, deployment, downward_env, kustomization, labels};

const WEBHOOK: &str = "multiarch-webhook";

/// `(file name, documents)` of `manifests/webhook/`. The TLS Secret `multiarch-webhook-tls`
/// (keys `tls.crt`, `tls.key`) and the `caBundle` of the MutatingWebhookConfiguration are
/// the installer's (cert-manager's, or the coming operator's); the certificate is
/// reloaded when the Secret changes.
pub fn webhook() -> Files {
    let mut deployment = deployment(
        WEBHOOK,
        "webhook",
        json!([
            "webhook",
            "--listen=0.0.0.0:9443",
            "--cert=/etc/multiarch/tls/tls.crt",
            "--key=/etc/multiarch/tls/tls.key",
            format!("--inspector-endpoint=http://{INSPECTOR}.{NAMESPACE}.svc:9443"),
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
            // The gate controller is the webhook's path for pods the scheduler does not
            // place (and gate mode's only path): installing one installs the other.
            vec![kustomization(&[
                "../gate-controller",
                "rbac.yaml",
                "webhook.yaml",
                "mutatingwebhookconfiguration.yaml",
            ])],
        ),
    ]
}
