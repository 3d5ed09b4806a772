//! Whether a name `spec.placement.schedulerName` is given belongs to another scheduler.
//! multiarch routes pods to its scheduler by that name and, when the name changes (a
//! rename, a mode switch, uninstall), recreates the pods still pending under it: under
//! kube-scheduler's `default-scheduler`, or the name of a scheduler already running,
//! that would be every pod waiting for that scheduler, every pass. A scheduler that binds
//! pods leaves `Scheduled` events reported under its name (kept an hour by default): the
//! name is refused while one that is not multiarch's shows.

use k8s_openapi::api::core::v1::Event;
use kube::{Api, api::ListParams};
use multiarch_crd::names::KUBE_SCHEDULER_NAME;

/// Why a scheduler name may not be taken.
#[derive(Debug, thiserror::Error)]
pub enum NameTaken {
    #[error(
        "schedulerName may not be {KUBE_SCHEDULER_NAME}: that is kube-scheduler's name, and the pods waiting for it are not multiarch's to place or release"
    )]
    KubeScheduler,
    #[error(
        "schedulerName {name:?} is used by another scheduler in the cluster (it placed {pod}, reported by {instance:?}): multiarch must not take its name, or it would place and release that scheduler's pods; choose another"
    )]
    InUse {
        name: String,
        pod: String,
        instance: String,
    },
    #[error(
        "cannot check that schedulerName {name:?} is not another scheduler's ({detail}): try again"
    )]
    Unchecked { name: String, detail: String },
}

/// Whether `name` may be given to multiarch's scheduler: not kube-scheduler's, and not one
/// another scheduler reports `Scheduled` events under. `ours` are the names multiarch's
/// scheduler places or placed (its events are its own).
pub async fn check(client: &kube::Client, name: &str, ours: &[String]) -> Result<(), NameTaken> {
    if name == KUBE_SCHEDULER_NAME {
        return Err(NameTaken::KubeScheduler);
    }
    if ours.iter().any(|n| n == name) {
        return Ok(());
    }
    // `source` is an event's reportingController (events.k8s.io) or source.component.
    let params = ListParams::default()
        .fields(&format!("source={name},reason=Scheduled"))
        .limit(1);
    let events = Api::<Event>::all(client.clone())
        .list(&params)
        .await
        .map_err(|e| NameTaken::Unchecked {
            name: name.to_owned(),
            detail: e.to_string(),
        })?;
    match events.items.first() {
        None => Ok(()),
        Some(event) => Err(NameTaken::InUse {
            name: name.to_owned(),
            pod: format!(
                "{}/{}",
                event
                    .involved_object
                    .namespace
                    .as_deref()
                    .unwrap_or_default(),
                event.involved_object.name.as_deref().unwrap_or_default()
            ),
            instance: event
                .reporting_instance
                .clone()
                .or_else(|| event.source.as_ref().and_then(|s| s.host.clone()))
                .unwrap_or_default(),
        }),
    }
}
