//! What matching a claim reads of the unclaimed volumes of a class pinned to one host, in
//! a few bytes kept beside the node list (see `LocalVolumeNodes`).
//!
//! A cycle for a pod whose claim only local volumes can serve checks hundreds of nodes,
//! and looking up each node's volumes in the catalog reads a hash table and the volumes
//! themselves, most of them not in the CPU cache (profiles showed this as most of such a
//! cycle). The summaries sit in one array in node order, which the cycle's walk reads in
//! order. They answer only where they know the answer; anywhere else the volumes are read.

use super::{AccessModes, ClaimInfo, PersistentVolumeInfo};

/// Volumes a host's summary describes; a host with more is read volume by volume.
pub const SUMMARIZED_PER_HOST: usize = 3;

/// What [`ClaimInfo::may_use_unclaimed`] reads of a volume whose match needs nothing
/// else: no attributes class, and a node affinity that asks for nothing but the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeDigest {
    capacity: i64,
    access_modes: AccessModes,
    block: bool,
    /// Available and not being deleted.
    usable: bool,
}

impl VolumeDigest {
    /// The digest of an unclaimed volume, or `None` when matching it needs more than the
    /// digest holds.
    pub fn of(volume: &PersistentVolumeInfo) -> Option<Self> {
        (volume.claim_ref.is_none()
            && volume.attributes_class.is_empty()
            && volume.hostname_only_affinity)
            .then_some(VolumeDigest {
                capacity: volume.capacity,
                access_modes: volume.access_modes,
                block: volume.block,
                usable: volume.available && !volume.deleting,
            })
    }
}

/// The unclaimed volumes of one class pinned to one host's name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HostVolumes {
    #[default]
    None,
    /// Every one of them, each described by its digest.
    Summarized {
        count: u8,
        digests: [VolumeDigest; SUMMARIZED_PER_HOST],
    },
    /// More than a summary holds, or one it cannot describe: read the volumes.
    Unsummarized,
}

impl HostVolumes {
    pub fn of<'a>(volumes: impl IntoIterator<Item = &'a PersistentVolumeInfo>) -> Self {
        let mut digests = [VolumeDigest::default(); SUMMARIZED_PER_HOST];
        let mut count = 0;
        for volume in volumes {
            let Some(digest) = VolumeDigest::of(volume) else {
                return HostVolumes::Unsummarized;
            };
            let Some(slot) = digests.get_mut(count) else {
                return HostVolumes::Unsummarized;
            };
            *slot = digest;
            count += 1;
        }
        match u8::try_from(count) {
            Ok(0) => HostVolumes::None,
            Ok(count) => HostVolumes::Summarized { count, digests },
            Err(_) => HostVolumes::Unsummarized,
        }
    }

    /// Whether `claim` finds a volume here on a node with this hostname, when the summary
    /// can tell (`None`: read the volumes). Only for claims that
    /// [`can_match_summaries`](ClaimInfo::can_match_summaries).
    pub fn serve(&self, claim: &ClaimInfo) -> Option<bool> {
        debug_assert!(claim.can_match_summaries());
        match self {
            HostVolumes::None => Some(false),
            HostVolumes::Summarized { count, digests } => Some(
                digests
                    .iter()
                    .take(usize::from(*count))
                    .any(|d| claim.may_use_digest(d)),
            ),
            HostVolumes::Unsummarized => None,
        }
    }
}

impl ClaimInfo {
    /// Whether summaries of volumes answer for this claim: it selects no labels and asks
    /// for no attributes class (what a digest does not hold).
    pub fn can_match_summaries(&self) -> bool {
        self.selector.is_none() && self.attributes_class.is_empty()
    }

    /// [`may_use_unclaimed`](Self::may_use_unclaimed) on a volume's digest.
    fn may_use_digest(&self, digest: &VolumeDigest) -> bool {
        digest.usable
            && digest.capacity >= self.request.unwrap_or(0)
            && digest.block == self.block
            && digest.access_modes.contains(self.access_modes)
    }
}
