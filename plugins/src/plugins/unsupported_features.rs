//! `UnsupportedFeatures`: a pod using a feature this scheduler does not place (see
//! `routing`) is refused with the feature's name, never placed as if it did not use it.
//! The webhook does not route such pods here; one that names the scheduler itself gets
//! this answer. Whether an extended resource is a DeviceClass's depends on the cluster's
//! DeviceClasses, which may change: a pod refused for a name a class no longer maps is
//! tried again.

use crate::{
    events::{ClusterChange, EventKind, QueueingHint},
    framework::{CycleContext, CycleState, Plugin, PreFilterPlugin, Status},
    model::{cluster::ClusterState, pod::PodInfo},
};
use multiarch_policy::routing::{self, Unsupported};

pub const NAME: &str = "UnsupportedFeatures";

pub struct UnsupportedFeatures;

/// What of the pod this scheduler does not place, with the cluster's DeviceClasses:
/// what its spec says (read once), and the extended resources it requests that a
/// DeviceClass maps now.
fn unsupported(pod: &PodInfo, cluster: &ClusterState) -> Vec<Unsupported> {
    let mut found = pod.extras().unsupported.to_vec();
    let mapped = cluster.device_class_resources();
    let asks_mapped = !mapped.is_empty()
        && pod
            .requests
            .scalar
            .iter()
            .any(|(name, _)| routing::is_device_class_resource(name, mapped));
    if asks_mapped && !found.contains(&Unsupported::DeviceClassExtendedResources) {
        found.push(Unsupported::DeviceClassExtendedResources);
    }
    found
}

impl Plugin for UnsupportedFeatures {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The spec's features are immutable; only the DeviceClasses' names can change.
    fn events(&self) -> &'static [EventKind] {
        &[EventKind::DeviceClassChange]
    }

    fn queueing_hint(
        &self,
        pod: &PodInfo,
        change: &ClusterChange<'_>,
        cluster: &ClusterState,
    ) -> QueueingHint {
        match change {
            ClusterChange::DeviceClassesChanged => {
                QueueingHint::from_bool(unsupported(pod, cluster).is_empty())
            }
            _ => QueueingHint::QueueSkip,
        }
    }
}

impl PreFilterPlugin for UnsupportedFeatures {
    fn pre_filter(&self, ctx: &CycleContext<'_>, _: &mut CycleState) -> Status {
        let found = unsupported(ctx.pod, ctx.cluster);
        if found.is_empty() {
            Status::skip()
        } else {
            Status::unresolvable(routing::explain(&found))
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodResourceClaim;

    use super::*;
    use crate::{framework::Code, model::pod::PodBuilder, testing::Fixture};

    #[test]
    fn pods_with_resource_claims_are_refused_by_name() {
        let mut pod = PodBuilder::new("ns", "p").obj();
        if let Some(spec) = pod.spec.as_mut() {
            spec.resource_claims = Some(vec![PodResourceClaim {
                name: "gpu".into(),
                ..PodResourceClaim::default()
            }]);
        }
        let f = Fixture::new(crate::model::pod::PodInfo::from_pod(&pod).unwrap());
        let status = UnsupportedFeatures.pre_filter(&f.ctx(), &mut CycleState::new());
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert!(
            status
                .message()
                .starts_with("pod uses dynamic resource claims")
        );
        // A DeviceClass's extended resource (DRAExtendedResource) is refused by name too.
        let device_class = PodBuilder::new("ns", "p")
            .container("c", "i", "100m", "0")
            .extended("deviceclass.resource.kubernetes.io/gpu.example.com", "1")
            .info();
        let status = UnsupportedFeatures
            .pre_filter(&Fixture::new(device_class).ctx(), &mut CycleState::new());
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert!(
            status
                .message()
                .starts_with("pod uses extended resources of a DeviceClass"),
            "{}",
            status.message()
        );
        let plain = Fixture::new(PodBuilder::new("ns", "p").info());
        assert_eq!(
            UnsupportedFeatures
                .pre_filter(&plain.ctx(), &mut CycleState::new())
                .code,
            Code::Skip
        );
    }

    /// A name a DeviceClass maps (`spec.extendedResourceName`) is refused while a class
    /// maps it; a pod refused for it is tried again once none does.
    #[test]
    fn names_a_device_class_maps_are_refused_while_it_maps_them() {
        use multiarch_policy::device_class_resources::DeviceClassResources;

        use crate::events::QueueingHint;

        let pod = PodBuilder::new("ns", "p")
            .container("c", "i", "100m", "0")
            .extended("example.com/gpu", "1")
            .info();
        let mut cluster = ClusterState::new();
        let unmapped = Fixture::new(pod.clone()).with_cluster(cluster.clone());
        assert_eq!(
            UnsupportedFeatures
                .pre_filter(&unmapped.ctx(), &mut CycleState::new())
                .code,
            Code::Skip,
            "a device plugin's resource is NodeResourcesFit's"
        );
        let gpu = DeviceClassResources::of([("gpu.example.com", Some("example.com/gpu"))]);
        assert!(cluster.set_device_class_resources(gpu.clone()));
        assert!(!cluster.set_device_class_resources(gpu));
        let mapped = Fixture::new(pod.clone()).with_cluster(cluster.clone());
        let status = UnsupportedFeatures.pre_filter(&mapped.ctx(), &mut CycleState::new());
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert!(
            status
                .message()
                .starts_with("pod uses extended resources of a DeviceClass"),
            "{}",
            status.message()
        );
        let hint = |cluster: &ClusterState| {
            UnsupportedFeatures.queueing_hint(&pod, &ClusterChange::DeviceClassesChanged, cluster)
        };
        assert_eq!(hint(&cluster), QueueingHint::QueueSkip, "still mapped");
        let other = DeviceClassResources::of([("fpga.example.com", Some("example.com/fpga"))]);
        cluster.set_device_class_resources(other);
        assert_eq!(hint(&cluster), QueueingHint::Queue, "no longer mapped");
        assert_eq!(
            UnsupportedFeatures.queueing_hint(&pod, &ClusterChange::ConfigChanged, &cluster),
            QueueingHint::QueueSkip
        );
    }
}
