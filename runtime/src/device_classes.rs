//! The cluster's DeviceClasses, as the extended resource names they map
//! (`DeviceClassResources`): the webhook routes, and the scheduler refuses, pods that ask
//! for one (dynamic resource allocation stays with kube-scheduler). Followed with a
//! watch; only each class's name and mapped name are kept.
//!
//! A cluster that does not serve `resource.k8s.io/v1` (older than 1.34) has no
//! DeviceClass: its `404` is read as none, once, and the list is tried again with the
//! watch's backoff (an upgraded cluster serves it). Any other failure is not "none": the
//! snapshot stays unsynced and the failure is logged.

use std::sync::Arc;

use futures_util::StreamExt;
use k8s_openapi::api::resource::v1::DeviceClass;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use multiarch_policy::device_class_resources::DeviceClassResources;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::supervisor::Tasks;

/// What the DeviceClasses map, and whether they have been read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceClasses {
    pub resources: DeviceClassResources,
    /// Listed once (or the API is not served): until then a pod asking for a name a
    /// class may map cannot be told apart.
    pub synced: bool,
}

/// The watch ended, which it never does before shutdown.
#[derive(Debug, thiserror::Error)]
#[error("the DeviceClass watch ended")]
pub struct WatchEnded;

/// Follows the DeviceClasses under `tasks` until shutdown.
pub fn follow(client: &kube::Client, tasks: &Tasks) -> watch::Receiver<Arc<DeviceClasses>> {
    let (tx, rx) = watch::channel(Arc::new(DeviceClasses::default()));
    let api = Api::<DeviceClass>::all(client.clone());
    let mut events = watcher(api, watcher::Config::default().page_size(500))
        .default_backoff()
        .boxed();
    let shutdown = tasks.shutdown().clone();
    tasks.spawn("DeviceClass watch", async move {
        let mut state = Following::default();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return Ok::<(), WatchEnded>(()),
                next = events.next() => next.ok_or(WatchEnded)?,
            };
            if let Some(snapshot) = state.take(event) {
                tx.send_if_modified(|current| {
                    let changed = **current != snapshot;
                    if changed {
                        *current = Arc::new(snapshot);
                    }
                    changed
                });
            }
        }
    });
    rx
}

/// The watch's events so far.
#[derive(Default)]
struct Following {
    current: DeviceClasses,
    /// A relist under way.
    listing: Option<DeviceClassResources>,
    told_not_served: bool,
}

fn mapped_name(class: &DeviceClass) -> Option<&str> {
    class.spec.extended_resource_name.as_deref()
}

impl Following {
    /// Takes one event in; the snapshot to publish, if it changed anything.
    fn take(
        &mut self,
        event: Result<watcher::Event<DeviceClass>, watcher::Error>,
    ) -> Option<DeviceClasses> {
        match event {
            Ok(watcher::Event::Init) => {
                self.listing = Some(DeviceClassResources::default());
                None
            }
            Ok(watcher::Event::InitApply(class)) => {
                if let Some(listing) = &mut self.listing {
                    listing.set(&class.name_any(), mapped_name(&class));
                }
                None
            }
            Ok(watcher::Event::InitDone) => {
                self.current = DeviceClasses {
                    resources: self.listing.take().unwrap_or_default(),
                    synced: true,
                };
                if !self.current.resources.complete() {
                    warn!(
                        max = multiarch_policy::device_class_resources::MAX_DEVICE_CLASSES,
                        "more DeviceClasses than are read: the names of the others are not known to map DeviceClass resources"
                    );
                }
                Some(self.current.clone())
            }
            Ok(watcher::Event::Apply(class)) => {
                self.current
                    .resources
                    .set(&class.name_any(), mapped_name(&class));
                Some(self.current.clone())
            }
            Ok(watcher::Event::Delete(class)) => {
                self.current.resources.remove(&class.name_any());
                Some(self.current.clone())
            }
            Err(watcher::Error::InitialListFailed(kube::Error::Api(status)))
                if status.code == 404 =>
            {
                if !self.told_not_served {
                    info!(
                        "the cluster does not serve resource.k8s.io/v1 DeviceClasses: none maps an extended resource"
                    );
                    self.told_not_served = true;
                }
                self.listing = None;
                self.current = DeviceClasses {
                    resources: DeviceClassResources::default(),
                    synced: true,
                };
                Some(self.current.clone())
            }
            Err(error) => {
                warn!(%error, "cannot read the DeviceClasses; retried with backoff");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn class(name: &str, mapped: Option<&str>) -> DeviceClass {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"extendedResourceName": mapped},
        }))
        .unwrap()
    }

    fn not_served() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure(
                "the server could not find the requested resource",
                "NotFound",
            )
            .with_code(404)
            .boxed(),
        ))
    }

    #[test]
    fn the_snapshot_follows_lists_and_changes() {
        let mut following = Following::default();
        assert_eq!(following.take(Ok(watcher::Event::Init)), None);
        assert_eq!(
            following.take(Ok(watcher::Event::InitApply(class(
                "gpu",
                Some("example.com/gpu")
            )))),
            None
        );
        let listed = following.take(Ok(watcher::Event::InitDone)).unwrap();
        assert!(listed.synced && listed.resources.maps("example.com/gpu"));
        let changed = following
            .take(Ok(watcher::Event::Apply(class("gpu", None))))
            .unwrap();
        assert!(!changed.resources.maps("example.com/gpu"));
        let added = following
            .take(Ok(watcher::Event::Apply(class(
                "fpga",
                Some("example.com/fpga"),
            ))))
            .unwrap();
        assert!(added.resources.maps("example.com/fpga"));
        let deleted = following
            .take(Ok(watcher::Event::Delete(class(
                "fpga",
                Some("example.com/fpga"),
            ))))
            .unwrap();
        assert!(deleted.resources.is_empty());
    }

    #[test]
    fn an_api_not_served_is_none_and_another_failure_is_not() {
        let mut following = Following::default();
        let failed = watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure("etcd timed out", "InternalError")
                .with_code(500)
                .boxed(),
        ));
        assert_eq!(
            following.take(Err(failed)),
            None,
            "a failure is not an empty list"
        );
        let none = following.take(Err(not_served())).unwrap();
        assert!(none.synced && none.resources.is_empty());
    }
}
