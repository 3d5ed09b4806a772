//! `UnsupportedFeatures`: a pod using a feature this scheduler does not place (see
//! `routing`) is refused with the feature's name, never placed as if it did not use it.
//! The webhook does not route such pods here; one that names the scheduler itself gets
//! this answer.

use crate::{
    events::EventKind,
    framework::{CycleContext, CycleState, Plugin, PreFilterPlugin, Status},
};
use multiarch_policy::routing;

pub const NAME: &str = "UnsupportedFeatures";

pub struct UnsupportedFeatures;

impl Plugin for UnsupportedFeatures {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The features are in immutable parts of the pod spec: no cluster change helps.
    fn events(&self) -> &'static [EventKind] {
        &[]
    }
}

impl PreFilterPlugin for UnsupportedFeatures {
    fn pre_filter(&self, ctx: &CycleContext<'_>, _: &mut CycleState) -> Status {
        if ctx.pod.unsupported.is_empty() {
            Status::skip()
        } else {
            Status::unresolvable(routing::explain(&ctx.pod.unsupported))
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
}
