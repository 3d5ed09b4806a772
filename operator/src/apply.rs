//! Writing operand objects: server-side apply under one field manager, only when the
//! stored object differs from what is wanted, so reconciling an unchanged configuration
//! writes nothing.
//!
//! "Differs" is decided on the object as read: every field the operator wants must be
//! there with its value (the API server's defaults and other controllers' fields are
//! left alone), and the hash of the whole wanted object, kept in an annotation, must
//! match, so a field the operator stops wanting is noticed too (the apply then removes
//! it, since the operator owned it).

use kube::{
    Api,
    api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams},
};
use multiarch_crd::names::SINGLETON_NAME;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The field manager of every write of the operator's.
pub const FIELD_MANAGER: &str = "multiarch-operator";
/// Objects the operator created carry this label (`app.kubernetes.io/managed-by`).
pub const MANAGED_BY: &str = "multiarch-operator";
/// The hash of the object as last applied.
pub const HASH_ANNOTATION: &str = "multiarch.openshift.io/applied-hash";

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{kind} {name}: {source}")]
    Api {
        kind: String,
        name: String,
        source: kube::Error,
    },
    #[error("the operator has no API resource for {0}")]
    UnknownKind(String),
}

/// The ClusterPodPlacementConfig the operands belong to.
#[derive(Clone, Debug)]
pub struct Owner {
    pub uid: String,
}

impl Owner {
    fn reference(&self) -> Value {
        json!([{
            "apiVersion": "multiarch.openshift.io/v1beta1", "kind": "ClusterPodPlacementConfig",
            "name": SINGLETON_NAME, "uid": self.uid, "controller": true, "blockOwnerDeletion": true,
        }])
    }
}

/// Marks `object` as the operator's and `owner`'s, and hashes it.
pub fn owned(mut object: Value, owner: Option<&Owner>) -> Value {
    object["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!(MANAGED_BY);
    object["metadata"]["labels"]["app.kubernetes.io/part-of"] = json!("multiarch");
    if let Some(owner) = owner {
        object["metadata"]["ownerReferences"] = owner.reference();
    }
    with_hash(object)
}

/// `(group, version, plural, namespaced)` of the kinds the operator writes.
fn resource_of(api_version: &str, kind: &str) -> Option<(&'static str, &'static str, bool)> {
    Some(match (api_version, kind) {
        ("v1", "ServiceAccount") => ("", "serviceaccounts", true),
        ("v1", "Service") => ("", "services", true),
        ("v1", "Secret") => ("", "secrets", true),
        ("apps/v1", "Deployment") => ("apps", "deployments", true),
        ("apps/v1", "DaemonSet") => ("apps", "daemonsets", true),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            ("rbac.authorization.k8s.io", "clusterroles", false)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            ("rbac.authorization.k8s.io", "clusterrolebindings", false)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => ("rbac.authorization.k8s.io", "roles", true),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            ("rbac.authorization.k8s.io", "rolebindings", true)
        }
        ("policy/v1", "PodDisruptionBudget") => ("policy", "poddisruptionbudgets", true),
        ("networking.k8s.io/v1", "NetworkPolicy") => ("networking.k8s.io", "networkpolicies", true),
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            false,
        ),
        ("monitoring.coreos.com/v1", "ServiceMonitor") => {
            ("monitoring.coreos.com", "servicemonitors", true)
        }
        ("monitoring.coreos.com/v1", "PrometheusRule") => {
            ("monitoring.coreos.com", "prometheusrules", true)
        }
        _ => return None,
    })
}

/// An object's identity: what to get, apply or delete.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectKey {
    pub fn of(object: &Value) -> ObjectKey {
        ObjectKey {
            api_version: object["apiVersion"].as_str().unwrap_or("").to_owned(),
            kind: object["kind"].as_str().unwrap_or("").to_owned(),
            namespace: object["metadata"]["namespace"].as_str().map(str::to_owned),
            name: object["metadata"]["name"].as_str().unwrap_or("").to_owned(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// Whether `actual` holds every field of `desired` with its value. An empty list or map
/// wanted matches an absent one (the API server does not store them).
pub fn contains(actual: &Value, desired: &Value) -> bool {
    match (desired, actual) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(k, v)| match have.get(k) {
            Some(a) => contains(a, v),
            None => is_empty(v),
        }),
        (Value::Object(want), Value::Null) => want.is_empty(),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| contains(h, w))
        }
        (Value::Array(want), Value::Null) => want.is_empty(),
        (Value::Number(w), Value::Number(h)) => w.as_f64() == h.as_f64(),
        (w, h) => w == h,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        _ => false,
    }
}

/// `desired` with the hash of itself in [`HASH_ANNOTATION`].
pub fn with_hash(mut desired: Value) -> Value {
    if let Some(annotations) = desired["metadata"]["annotations"].as_object_mut() {
        annotations.remove(HASH_ANNOTATION);
    }
    let digest = Sha256::digest(desired.to_string().as_bytes());
    let hash = hex::encode(&digest[..8]);
    desired["metadata"]["annotations"][HASH_ANNOTATION] = Value::String(hash);
    desired
}

/// Whether the stored object is what `desired` (hashed by [`with_hash`]) asks for.
pub fn up_to_date(stored: &Value, desired: &Value) -> bool {
    contains(stored, desired)
}

/// What [`Applier::ensure`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    Unchanged,
    Created,
    Updated,
}

/// Reads and writes operand objects of any kind.
#[derive(Clone)]
pub struct Applier {
    client: kube::Client,
}

impl Applier {
    pub fn new(client: kube::Client) -> Self {
        Applier { client }
    }

    fn api(&self, key: &ObjectKey) -> Result<Api<DynamicObject>, ApplyError> {
        let (group, plural, namespaced) = resource_of(&key.api_version, &key.kind)
            .ok_or_else(|| ApplyError::UnknownKind(format!("{} {}", key.api_version, key.kind)))?;
        let version = key.api_version.rsplit('/').next().unwrap_or("v1");
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, &key.kind),
            plural,
        );
        Ok(match (&key.namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(self.client.clone(), ns, &resource),
            _ => Api::all_with(self.client.clone(), &resource),
        })
    }

    fn error(key: &ObjectKey, source: kube::Error) -> ApplyError {
        ApplyError::Api {
            kind: key.kind.clone(),
            name: key.to_string(),
            source,
        }
    }

    /// The stored object, if any.
    pub async fn get(&self, key: &ObjectKey) -> Result<Option<Value>, ApplyError> {
        let api = self.api(key)?;
        let found = api
            .get_opt(&key.name)
            .await
            .map_err(|e| Self::error(key, e))?;
        Ok(found.map(|o| serde_json::to_value(o).unwrap_or(Value::Null)))
    }

    /// Applies `desired` (already hashed) unless the stored object is up to date.
    pub async fn ensure(&self, desired: &Value) -> Result<Applied, ApplyError> {
        let key = ObjectKey::of(desired);
        let stored = self.get(&key).await?;
        if stored.as_ref().is_some_and(|s| up_to_date(s, desired)) {
            return Ok(Applied::Unchanged);
        }
        let api = self.api(&key)?;
        api.patch(
            &key.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await
        .map_err(|e| Self::error(&key, e))?;
        Ok(if stored.is_some() {
            Applied::Updated
        } else {
            Applied::Created
        })
    }

    /// Deletes the object if it exists and the operator made it (its label); `true` when
    /// a delete was sent.
    pub async fn delete_ours(&self, key: &ObjectKey) -> Result<bool, ApplyError> {
        let Some(stored) = self.get(key).await? else {
            return Ok(false);
        };
        if stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] != MANAGED_BY {
            return Ok(false);
        }
        if !stored["metadata"]["deletionTimestamp"].is_null() {
            return Ok(false);
        }
        let api = self.api(key)?;
        match api.delete(&key.name, &DeleteParams::background()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(Self::error(key, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn server_defaults_and_other_fields_do_not_count_as_changes() {
        let desired = with_hash(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "labels": {"a": "b"}},
            "spec": {"ports": [{"name": "m", "port": 8080}], "selector": {"a": "b"}, "externalIPs": []}}),
        );
        let mut stored = desired.clone();
        stored["metadata"]["uid"] = json!("u");
        stored["metadata"]["labels"]["added-by-someone"] = json!("x");
        stored["spec"]["ports"][0]["protocol"] = json!("TCP");
        stored["spec"]["clusterIP"] = json!("10.0.0.1");
        stored["spec"]
            .as_object_mut()
            .unwrap()
            .remove("externalIPs");
        assert!(up_to_date(&stored, &desired));

        let mut changed = stored.clone();
        changed["spec"]["ports"][0]["port"] = json!(9090);
        assert!(!up_to_date(&changed, &desired));
        // A field the operator no longer wants changes the hash.
        let mut fewer = desired.clone();
        fewer["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("a");
        assert!(!up_to_date(&stored, &with_hash(fewer)));
    }

    #[test]
    fn every_kind_the_operator_installs_has_a_resource() {
        let settings = crate::install::Settings::default();
        let mut all = crate::install::inspector_workload(&settings, false).unwrap();
        all.extend(crate::install::enoexec_daemon_access(&settings));
        all.extend(crate::install::enoexec_daemon_workload(&settings).unwrap());
        all.extend(crate::install::webhook_access(&settings));
        all.push(crate::install::mutating_webhook_configuration(
            &settings,
            &crate::install::WebhookRoute::default(),
        ));
        all.push(crate::install::service_monitor(&settings, "x", "y"));
        for object in all {
            let key = ObjectKey::of(&object);
            assert!(resource_of(&key.api_version, &key.kind).is_some(), "{key}");
        }
    }
}
