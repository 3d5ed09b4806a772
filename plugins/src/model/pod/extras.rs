//! What few pods carry, kept out of line: a pod without any of it holds one null pointer
//! instead of 80 bytes. At 130,000 nodes x 260,000 pods the bound `PodInfo`s were the
//! largest item of `simulate`'s memory (126 MB, 480 bytes each); most pods have no
//! annotation the model keeps (only unassigned pods keep them), no image volume,
//! scheduling gate, nomination, unsupported feature or pull secret.

use std::sync::LazyLock;

use multiarch_policy::{routing::Unsupported, selectors::Labels};
use thin_vec::ThinVec;

use super::PodInfo;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodExtras {
    /// Unassigned pods only (`celArchitecturePlacement` rules may read them); an assigned
    /// pod's are never needed, so the cluster model does not hold them.
    pub annotations: Labels,
    /// The references of `image` volumes (`ImageLocality` counts them; they are never
    /// executed, so their architectures do not matter).
    pub image_volumes: ThinVec<String>,
    pub scheduling_gates: ThinVec<String>,
    /// `status.nominatedNodeName`: where a preemption made room for the pod.
    pub nominated_node: Option<String>,
    /// Features this scheduler does not place (see `routing`); the pod is refused with
    /// their names rather than placed wrongly.
    pub unsupported: ThinVec<Unsupported>,
    /// `imagePullSecrets` names: with the service account, where the image inspector
    /// finds the pod's pull credentials.
    pub image_pull_secrets: ThinVec<String>,
}

/// What a pod without extras reads.
static NO_EXTRAS: LazyLock<PodExtras> = LazyLock::new(PodExtras::default);

impl PodExtras {
    /// `None` when there is nothing to keep.
    pub fn boxed(self) -> Option<Box<PodExtras>> {
        (self != PodExtras::default()).then(|| Box::new(self))
    }
}

impl PodInfo {
    pub fn extras(&self) -> &PodExtras {
        self.extras.as_deref().unwrap_or(&NO_EXTRAS)
    }

    /// For writing (tests, builders, the nomination): allocates them if the pod had none.
    pub fn extras_mut(&mut self) -> &mut PodExtras {
        self.extras.get_or_insert_with(Box::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_without_extras_holds_none_and_reads_empty_ones() {
        assert!(PodExtras::default().boxed().is_none());
        let pod = PodInfo::default();
        assert!(pod.extras.is_none());
        assert!(pod.extras().annotations.is_empty() && pod.extras().nominated_node.is_none());

        let gated = PodExtras {
            scheduling_gates: ThinVec::from(vec!["wait".to_owned()]),
            ..PodExtras::default()
        };
        let pod = PodInfo {
            extras: gated.clone().boxed(),
            ..PodInfo::default()
        };
        assert_eq!(pod.extras(), &gated);
    }
}
