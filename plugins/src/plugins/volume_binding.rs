//! `VolumeBinding` (refusal only): this scheduler does not bind PersistentVolumeClaims
//! yet, so it rejects such pods with a clear reason instead of ignoring volume topology.

use crate::{
    framework::{CycleContext, CycleState, Plugin, PreFilterPlugin, Status},
    model::cluster::ClusterEvent,
};

pub const NAME: &str = "VolumeBinding";

pub struct VolumeBinding;

impl Plugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events(&self) -> &'static [ClusterEvent] {
        &[]
    }
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(&self, ctx: &CycleContext<'_>, _: &mut CycleState) -> Status {
        if ctx.pod.unsupported_volumes.is_empty() {
            return Status::skip();
        }
        Status::unresolvable(format!(
            "pod uses PersistentVolumeClaim volume(s) ({}), which this scheduler does not bind yet; \
             let the default scheduler place it (label the pod multiarch.openshift.io/scheduler=default)",
            ctx.pod.unsupported_volumes.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{framework::Code, model::pod::PodBuilder, testing::Fixture};

    #[test]
    fn pods_with_claims_are_refused_clearly() {
        let f = Fixture::new(PodBuilder::new("ns", "p").pvc("data", "claim-1").info());
        let status = VolumeBinding.pre_filter(&f.ctx(), &mut CycleState::new());
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert!(
            status
                .message()
                .starts_with("pod uses PersistentVolumeClaim volume(s) (data)")
        );
        let plain = Fixture::new(PodBuilder::new("ns", "p").info());
        assert_eq!(
            VolumeBinding
                .pre_filter(&plain.ctx(), &mut CycleState::new())
                .code,
            Code::Skip
        );
    }
}
