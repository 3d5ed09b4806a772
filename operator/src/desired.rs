//! The objects the operator wants, in apply order, for a target: each labelled as the
//! operator's, owned by the ClusterPodPlacementConfig (so the garbage collector removes
//! whatever an uninstall leaves) and hashed for the up-to-date check. No I/O.

use multiarch_crd::ClusterPodPlacementConfigSpec;
use multiarch_flags::FlagsError;
use serde_json::Value;

use crate::{
    apply::{ObjectKey, Owner, owned},
    certificates::{SecretData, secrets::secret},
    install::{self, Settings, WEBHOOK, WEBHOOK_TLS_SECRET, WebhookRoute},
    observe::reads::OptionalApis,
    target::Target,
};

/// Everything a target installs.
pub struct Wanted<'a> {
    pub settings: &'a Settings,
    pub spec: &'a ClusterPodPlacementConfigSpec,
    pub target: &'a Target,
    pub owner: &'a Owner,
    /// Base64 of the CA bundle the API server verifies the webhook with.
    pub ca_bundle: &'a str,
    pub webhook_tls: &'a SecretData,
    /// The inspector's serving certificate, and its clients'.
    pub inspector_tls: &'a SecretData,
    pub inspector_client_tls: &'a SecretData,
    /// The optional APIs the cluster serves.
    pub apis: OptionalApis,
    /// Names the scheduler placed before a rename (see `PREVIOUS_SCHEDULER_NAMES`).
    pub previous_scheduler_names: &'a [String],
}

/// The objects, in the order they are applied: access first, then the workloads, the
/// webhook configuration (its components are up by then) and the webhook's certificate.
pub fn objects(wanted: &Wanted<'_>) -> Result<Vec<Value>, FlagsError> {
    let s = wanted.settings;
    let scheduler_name = wanted.spec.placement_or_default().scheduler_name;
    let mut access = install::inspector_access(s);
    access.extend(install::webhook_access(s));
    access.extend(install::gate_controller_access(s));
    let read_binaries = wanted
        .spec
        .plugins
        .as_ref()
        .is_some_and(|p| p.binary_inspection_enabled());
    let mut workloads = install::inspector_workload(s, read_binaries)?;
    workloads.extend(install::webhook_workload(s)?);
    workloads.extend(install::gate_controller_workload(s)?);
    let mut monitors = vec![
        // The operator's own metrics (routing, certificates' expiry) feed alerts too.
        install::service_monitor(s, install::OPERATOR, "operator"),
        install::service_monitor(s, install::INSPECTOR, "inspector"),
        install::service_monitor(s, install::GATE_CONTROLLER, "gate-controller"),
        install::webhook_service_monitor(s),
    ];
    if wanted.target.scheduler {
        access.extend(install::scheduler_access(s, &scheduler_name));
        workloads.extend(install::scheduler_workload(
            s,
            &scheduler_name,
            wanted.previous_scheduler_names,
        )?);
        monitors.push(install::service_monitor(s, install::SCHEDULER, "scheduler"));
    }
    if wanted.target.enoexec_daemon {
        access.extend(install::enoexec_daemon_access(s));
        workloads.extend(install::enoexec_daemon_workload(s)?);
        monitors.push(install::service_monitor(
            s,
            install::ENOEXEC_DAEMON,
            "enoexec-daemon",
        ));
    }
    if wanted.target.enoexec_handler {
        access.extend(install::enoexec_handler_access(s));
        workloads.extend(install::enoexec_handler_workload(s)?);
        monitors.push(install::service_monitor(
            s,
            install::ENOEXEC_HANDLER,
            "enoexec-handler",
        ));
    }
    let mut all = access;
    // Before the pods that mount them, which would otherwise wait for them. Every CA
    // still valid is in each `ca.crt`, so their order against a CA rotation is free.
    for (name, data) in [
        (install::INSPECTOR_TLS_SECRET, wanted.inspector_tls),
        (
            install::INSPECTOR_CLIENT_SECRET,
            wanted.inspector_client_tls,
        ),
    ] {
        all.push(secret(s, name, "kubernetes.io/tls", data));
    }
    all.extend(workloads);
    if wanted.apis.service_monitors {
        all.extend(monitors);
    }
    if wanted.apis.prometheus_rules {
        all.push(install::prometheus_rule(s));
    }
    all.extend(webhook_configuration(wanted));
    // The certificate last: a new CA reaches the API server's bundle (above) before
    // anything it signed is served.
    all.push(secret(
        s,
        WEBHOOK_TLS_SECRET,
        "kubernetes.io/tls",
        wanted.webhook_tls,
    ));
    Ok(all
        .into_iter()
        .map(|o| owned(o, Some(wanted.owner)))
        .collect())
}

/// The mutating webhook configuration, when the target routes pods.
fn webhook_configuration(wanted: &Wanted<'_>) -> Option<Value> {
    let route = WebhookRoute {
        mode: Some(wanted.target.routing?),
        namespace_selector: wanted
            .spec
            .namespace_selector
            .as_ref()
            .and_then(|sel| serde_json::to_value(sel).ok()),
        ca_bundle: Some(wanted.ca_bundle.to_owned()),
    };
    Some(install::mutating_webhook_configuration(
        wanted.settings,
        &route,
    ))
}

/// Every object the operator may install with `settings` on a cluster serving `apis`:
/// what it removes when a target no longer wants it, and at uninstall.
pub fn every_key(settings: &Settings, apis: OptionalApis) -> Result<Vec<ObjectKey>, FlagsError> {
    let target = Target {
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
        target: &target,
        owner: &Owner { uid: String::new() },
        ca_bundle: "",
        webhook_tls: &SecretData::new(),
        inspector_tls: &SecretData::new(),
        inspector_client_tls: &SecretData::new(),
        apis,
        previous_scheduler_names: &[],
    };
    let mut keys: Vec<ObjectKey> = objects(&wanted)?.iter().map(ObjectKey::of).collect();
    keys.sort();
    keys.dedup();
    Ok(keys)
}

/// The key of the Secret holding the pod placement webhook's certificate.
pub fn webhook_certificate_key(settings: &Settings) -> ObjectKey {
    ObjectKey {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: Some(settings.namespace.clone()),
        name: WEBHOOK_TLS_SECRET.into(),
    }
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
    use crate::apply::MANAGED_BY;

    /// Scheduler mode routed, without the exec-format-error components.
    fn scheduler_mode() -> Target {
        Target {
            scheduler: true,
            enoexec_daemon: false,
            enoexec_handler: false,
            routing: Some(PlacementMode::Scheduler),
            draining_scheduler: false,
            draining_enoexec: false,
        }
    }

    #[test]
    fn the_webhook_configuration_comes_last_and_everything_is_owned() {
        let settings = Settings::default();
        let target = scheduler_mode();
        let objects = objects(&Wanted {
            settings: &settings,
            spec: &ClusterPodPlacementConfigSpec::default(),
            target: &target,
            owner: &Owner { uid: "u-1".into() },
            ca_bundle: "Q0E=",
            webhook_tls: &SecretData::from([("tls.crt".into(), b"x".to_vec())]),
            inspector_tls: &SecretData::from([("tls.crt".into(), b"i".to_vec())]),
            inspector_client_tls: &SecretData::from([("tls.crt".into(), b"c".to_vec())]),
            apis: OptionalApis::default(),
            previous_scheduler_names: &[],
        })
        .unwrap();
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
        let position = |kind: &str, name: &str| {
            objects
                .iter()
                .position(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .unwrap_or_else(|| panic!("no {kind} {name}"))
        };
        let data = |name: &str| objects[position("Secret", name)]["data"]["tls.crt"].clone();
        assert_eq!(data(WEBHOOK_TLS_SECRET), "eA==");
        assert_eq!(data(install::INSPECTOR_TLS_SECRET), "aQ==");
        assert_eq!(data(install::INSPECTOR_CLIENT_SECRET), "Yw==");
        // The inspector's certificates exist before any pod that mounts them.
        for secret in [
            install::INSPECTOR_TLS_SECRET,
            install::INSPECTOR_CLIENT_SECRET,
        ] {
            for deployment in [install::INSPECTOR, install::SCHEDULER, WEBHOOK] {
                assert!(position("Secret", secret) < position("Deployment", deployment));
            }
        }
        let keys = every_key(&settings, OptionalApis::default()).unwrap();
        assert!(keys.contains(&webhook_configuration_key()));
        assert!(keys.iter().any(|k| k.kind == "DaemonSet"));
    }

    /// `plugins.binaryInspection` on: the inspector's Deployment reads binaries.
    #[test]
    fn binary_inspection_turns_the_inspectors_reading_on() {
        let settings = Settings::default();
        let target = scheduler_mode();
        let inspector_args = |spec: &ClusterPodPlacementConfigSpec| {
            let objects = objects(&Wanted {
                settings: &settings,
                spec,
                target: &target,
                owner: &Owner { uid: "u-1".into() },
                ca_bundle: "Q0E=",
                webhook_tls: &SecretData::new(),
                inspector_tls: &SecretData::new(),
                inspector_client_tls: &SecretData::new(),
                apis: OptionalApis::default(),
                previous_scheduler_names: &[],
            })
            .unwrap();
            let deployment = objects
                .iter()
                .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == install::INSPECTOR)
                .unwrap()
                .clone();
            deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .unwrap()
                .clone()
        };
        let off = ClusterPodPlacementConfigSpec::default();
        assert!(!inspector_args(&off).contains(&serde_json::json!("--read-binaries")));
        let on: ClusterPodPlacementConfigSpec = serde_json::from_value(
            serde_json::json!({"plugins": {"binaryInspection": {"enabled": true}}}),
        )
        .unwrap();
        assert!(inspector_args(&on).contains(&serde_json::json!("--read-binaries")));
    }

    #[test]
    fn kinds_the_cluster_does_not_serve_are_never_keys() {
        let settings = Settings::default();
        let without = every_key(&settings, OptionalApis::default()).unwrap();
        assert!(!without.iter().any(|k| k.kind == "ServiceMonitor"));
        let with = every_key(
            &settings,
            OptionalApis {
                service_monitors: true,
                prometheus_rules: false,
            },
        )
        .unwrap();
        let monitors: Vec<&ObjectKey> =
            with.iter().filter(|k| k.kind == "ServiceMonitor").collect();
        assert_eq!(monitors.len(), 7, "{monitors:?}");
        assert!(
            monitors
                .iter()
                .all(|k| k.api_version == install::SERVICE_MONITOR_API_VERSION)
        );
        assert_eq!(with.len(), without.len() + monitors.len());
        assert!(!with.iter().any(|k| k.kind == "PrometheusRule"));
        let alerts = every_key(
            &settings,
            OptionalApis {
                service_monitors: false,
                prometheus_rules: true,
            },
        )
        .unwrap();
        let rules: Vec<&ObjectKey> = alerts
            .iter()
            .filter(|k| k.kind == "PrometheusRule")
            .collect();
        assert_eq!(rules.len(), 1, "{rules:?}");
        assert_eq!(rules[0].api_version, install::PROMETHEUS_RULE_API_VERSION);
        assert_eq!(alerts.len(), without.len() + 1);
    }
}
