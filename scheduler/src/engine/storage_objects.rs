//! Storage objects as the scheduler learns of them, one type for every kind, so the
//! watches, the loop and `simulate` pass them through one door.

use multiarch_plugins::model::storage::{
    ClaimInfo, CsiDriverInfo, CsiNodeInfo, PersistentVolumeInfo, StorageCapacityInfo,
    StorageClassInfo, VolumeAttachmentInfo,
};

#[derive(Clone, Debug)]
pub enum StorageObject {
    Volume(PersistentVolumeInfo),
    Claim(ClaimInfo),
    Class(StorageClassInfo),
    CsiNode(CsiNodeInfo),
    CsiDriver(CsiDriverInfo),
    Capacity(StorageCapacityInfo),
    Attachment(VolumeAttachmentInfo),
}

/// A deleted storage object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageKey {
    Volume(String),
    /// Namespace and name.
    Claim(String, String),
    Class(String),
    CsiNode(String),
    CsiDriver(String),
    /// `namespace/name`.
    Capacity(String),
    Attachment(String),
}
