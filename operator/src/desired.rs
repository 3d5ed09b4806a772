//! The objects the operator wants, in apply order, for a plan: each labelled as the
//! operator's, owned by the ClusterPodPlacementConfig (so the garbage collector removes
//! whatever an uninstall leaves) and hashed for the up-to-date check. No I/O.

use base64::Engine;
use multiarch_crd::{ClusterPodPlacementConfigSpec, names::SINGLETON_NAME};
use serde_json::{Value, json};

use crate::{
    apply::{MANAGED_BY, ObjectKey, with_hash},
    certificates::SecretData,
    install::{self, Settings, WEBHOOK, WEBHOOK_TLS_SECRET, WebhookRoute},
    plan::Plan,
};

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

/// A Secret of type `type_` with `data`.
pub fn secret(settings: &Settings, name: &str, type_: &str, data: &SecretData) -> Value {
    let encoded: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": type_,
        "metadata": {"name": name, "namespace": settings.namespace, "labels": install::labels("certificates")},
        "data": encoded,
    })
}

/// Everything a plan installs.
pub struct Wanted<'a> {
    pub settings: &'a Settings,
    pub spec: &'a ClusterPodPlacementConfigSpec,
    pub plan: &'a Plan,
    pub owner: &'a Owner,
    /// Base64 of the CA bundle the API server verifies the webhook with.
    pub ca_bundle: &'a str,
    pub webhook_tls: &'a SecretData,
    /// The optional APIs the cluster serves.
    pub apis: OptionalApis,
}

/// Optional APIs the operator writes objects of when the cluster serves them, as
/// discovery found them. A kind the cluster does not serve has no objects: the operator
/// neither writes nor deletes any (the API server answers such a path with a plain
/// `404 page not found`, which is no object's absence).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptionalApis {
    /// prometheus-operator's `monitoring.coreos.com/v1` ServiceMonitors.
    pub service_monitors: bool,
}

/// The objects, in the order they are applied: access first, then the workloads, the
/// webhook configuration (its components are up by then) and the webhook's certificate.
pub fn objects(wanted: &Wanted<'_>) -> Vec<Value> {
    let s = wanted.settings;
    let scheduler_name = wanted.spec.placement_or_default().scheduler_name;
    let mut access = install::inspector_access(s);
    access.extend(install::webhook_access(s));
    access.extend(install::gate_controller_access(s));
    let mut workloads = install::inspector_workload(s);
    workloads.extend(install::webhook_workload(s));
    workloads.extend(install::gate_controller_workload(s));
    let mut monitors = vec![
        install::service_monitor(s, install::INSPECTOR, "inspector"),
        install::service_monitor(s, install::GATE_CONTROLLER, "gate-controller"),
        install::webhook_service_monitor(s),
    ];
    if wanted.plan.scheduler {
        access.extend(install::scheduler_access(s, &scheduler_name));
        workloads.extend(install::scheduler_workload(s, &scheduler_name));
        monitors.push(install::service_monitor(s, install::SCHEDULER, "scheduler"));
    }
    if wanted.plan.enoexec_daemon {
        access.extend(install::enoexec_daemon_access(s));
        workloads.extend(install::enoexec_daemon_workload(s));
        monitors.push(install::service_monitor(
            s,
            install::ENOEXEC_DAEMON,
            "enoexec-daemon",
        ));
    }
    if wanted.plan.enoexec_handler {
        access.extend(install::enoexec_handler_access(s));
        workloads.extend(install::enoexec_handler_workload(s));
        monitors.push(install::service_monitor(
            s,
            install::ENOEXEC_HANDLER,
            "enoexec-handler",
        ));
    }
    let mut all = access;
    all.extend(workloads);
    if wanted.apis.service_monitors {
        all.extend(monitors);
    }
    if let Some(mode) = wanted.plan.routing {
        all.push(install::mutating_webhook_configuration(
            s,
            &WebhookRoute {
                mode: Some(mode),
                namespace_selector: wanted
                    .spec
                    .namespace_selector
                    .as_ref()
                    .and_then(|sel| serde_json::to_value(sel).ok()),
                ca_bundle: Some(wanted.ca_bundle.to_owned()),
            },
        ));
    }
    // The certificate last: a new CA reaches the API server's bundle (above) before
    // anything it signed is served.
    all.push(secret(
        s,
        WEBHOOK_TLS_SECRET,
        "kubernetes.io/tls",
        wanted.webhook_tls,
    ));
    all.into_iter()
        .map(|o| owned(o, Some(wanted.owner)))
        .collect()
}

/// Every object the operator may install with `settings` on a cluster serving `apis`:
/// what it removes when a plan no longer wants it, and at uninstall.
pub fn every_key(settings: &Settings, apis: OptionalApis) -> Vec<ObjectKey> {
    let plan = Plan {
        scheduler: true,
        enoexec_daemon: true,
        enoexec_handler: true,
        routing: Some(multiarch_crd::PlacementMode::Scheduler),
        draining_scheduler: false,
        draining_enoexec: false,
    };
    let wanted = Wanted {
        settings,
        spec: &ClusterPodPlacementConfigSpec::default(),
        plan: &plan,
        owner: &Owner { uid: String::new() },
        ca_bundle: "",
        webhook_tls: &SecretData::new(),
        apis,
    };
    let mut keys: Vec<ObjectKey> = objects(&wanted).iter().map(ObjectKey::of).collect();
    keys.sort();
    keys.dedup();
    keys
}

/// The key of the MutatingWebhookConfiguration.
pub fn webhook_configuration_key() -> ObjectKey {
    ObjectKey {
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "MutatingWebhookConfiguration".into(),
        namespace: None,
        name: WEBHOOK.into(),
    }
}

#[cfg(test)]
mod tests {
    use multiarch_crd::PlacementMode;

    use super::*;

    #[test]
    fn the_webhook_configuration_comes_last_and_everything_is_owned() {
        let settings = Settings::default();
        let plan = Plan {
            scheduler: true,
            enoexec_daemon: false,
            enoexec_handler: false,
            routing: Some(PlacementMode::Scheduler),
            draining_scheduler: false,
            draining_enoexec: false,
        };
        let objects = objects(&Wanted {
            settings: &settings,
            spec: &ClusterPodPlacementConfigSpec::default(),
            plan: &plan,
            owner: &Owner { uid: "u-1".into() },
            ca_bundle: "Q0E=",
            webhook_tls: &SecretData::from([("tls.crt".into(), b"x".to_vec())]),
            apis: OptionalApis::default(),
        });
        let kinds: Vec<&str> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds[kinds.len() - 2..],
            ["MutatingWebhookConfiguration", "Secret"]
        );
        for o in &objects {
            assert_eq!(o["metadata"]["ownerReferences"][0]["uid"], "u-1", "{o}");
            assert_eq!(
                o["metadata"]["labels"]["app.kubernetes.io/managed-by"],
                MANAGED_BY
            );
        }
        assert!(!objects.iter().any(|o| o["kind"] == "DaemonSet"));
        assert!(!objects.iter().any(|o| o["kind"] == "ServiceMonitor"));
        let secret = objects.iter().find(|o| o["kind"] == "Secret").unwrap();
        assert_eq!(secret["data"]["tls.crt"], "eA==");
        let keys = every_key(&settings, OptionalApis::default());
        assert!(keys.contains(&webhook_configuration_key()));
        assert!(keys.iter().any(|k| k.kind == "DaemonSet"));
    }

    #[test]
    fn kinds_the_cluster_does_not_serve_are_never_keys() {
        let settings = Settings::default();
        let without = every_key(&settings, OptionalApis::default());
        assert!(!without.iter().any(|k| k.kind == "ServiceMonitor"));
        let with = every_key(
            &settings,
            OptionalApis {
                service_monitors: true,
            },
        );
        let monitors: Vec<&ObjectKey> =
            with.iter().filter(|k| k.kind == "ServiceMonitor").collect();
        assert_eq!(monitors.len(), 6, "{monitors:?}");
        assert!(
            monitors
                .iter()
                .all(|k| k.api_version == install::SERVICE_MONITOR_API_VERSION)
        );
        assert_eq!(with.len(), without.len() + monitors.len());
    }
}
