//! The volumes of a pod that scheduling depends on: claims (and generic ephemeral
//! volumes, which are claims named after the pod), disks that cannot be shared, and
//! in-tree volumes that count against CSI attach limits.

use k8s_openapi::api::core::v1 as core;
use thin_vec::ThinVec;

use crate::model::storage::migration::{self, MigratedVolume};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodVolume {
    pub name: String,
    pub claim: Option<PodClaim>,
    pub disk: Option<DiskId>,
    pub migrated: Option<MigratedVolume>,
}

/// A PersistentVolumeClaim the pod mounts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodClaim {
    pub name: String,
    /// A generic ephemeral volume: the claim is created for the pod and owned by it.
    pub ephemeral: bool,
}

/// An inline disk that two pods on one node may not both mount read-write
/// (`VolumeRestrictions`' disk conflicts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskId {
    GcePersistentDisk {
        name: String,
        read_only: bool,
    },
    AwsElasticBlockStore {
        volume_id: String,
    },
    Iscsi {
        iqn: String,
        read_only: bool,
    },
    Rbd {
        monitors: Vec<String>,
        pool: String,
        image: String,
        read_only: bool,
    },
}

impl DiskId {
    /// `isVolumeConflict`: the same disk, unless every mount is read-only (an EBS volume
    /// conflicts even then).
    pub fn conflicts_with(&self, other: &DiskId) -> bool {
        match (self, other) {
            (
                DiskId::GcePersistentDisk { name, read_only },
                DiskId::GcePersistentDisk {
                    name: other_name,
                    read_only: other_ro,
                },
            ) => name == other_name && !(*read_only && *other_ro),
            (
                DiskId::AwsElasticBlockStore { volume_id },
                DiskId::AwsElasticBlockStore {
                    volume_id: other_id,
                },
            ) => volume_id == other_id,
            (
                DiskId::Iscsi { iqn, read_only },
                DiskId::Iscsi {
                    iqn: other_iqn,
                    read_only: other_ro,
                },
            ) => iqn == other_iqn && !(*read_only && *other_ro),
            (
                DiskId::Rbd {
                    monitors,
                    pool,
                    image,
                    read_only,
                },
                DiskId::Rbd {
                    monitors: other_monitors,
                    pool: other_pool,
                    image: other_image,
                    read_only: other_ro,
                },
            ) => {
                monitors.iter().any(|m| other_monitors.contains(m))
                    && pool == other_pool
                    && image == other_image
                    && !(*read_only && *other_ro)
            }
            _ => false,
        }
    }
}

/// `ephemeral.VolumeClaimName`: `<pod>-<volume>`.
pub fn ephemeral_claim_name(pod: &str, volume: &str) -> String {
    format!("{pod}-{volume}")
}

fn disk_of(volume: &core::Volume) -> Option<DiskId> {
    if let Some(pd) = &volume.gce_persistent_disk {
        return Some(DiskId::GcePersistentDisk {
            name: pd.pd_name.clone(),
            read_only: pd.read_only == Some(true),
        });
    }
    if let Some(ebs) = &volume.aws_elastic_block_store {
        return Some(DiskId::AwsElasticBlockStore {
            volume_id: ebs.volume_id.clone(),
        });
    }
    if let Some(iscsi) = &volume.iscsi {
        return Some(DiskId::Iscsi {
            iqn: iscsi.iqn.clone(),
            read_only: iscsi.read_only == Some(true),
        });
    }
    if let Some(rbd) = &volume.rbd {
        return Some(DiskId::Rbd {
            monitors: rbd.monitors.clone(),
            pool: rbd.pool.clone().unwrap_or_else(|| "rbd".into()),
            image: rbd.image.clone(),
            read_only: rbd.read_only == Some(true),
        });
    }
    None
}

/// The volumes of `spec` that scheduling reads, in spec order.
pub fn pod_volumes(pod_name: &str, spec: &core::PodSpec) -> ThinVec<PodVolume> {
    spec.volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            let claim = if let Some(pvc) = &v.persistent_volume_claim {
                Some(PodClaim {
                    name: pvc.claim_name.clone(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| PodClaim {
                    name: ephemeral_claim_name(pod_name, &v.name),
                    ephemeral: true,
                })
            };
            let volume = PodVolume {
                name: v.name.clone(),
                claim,
                disk: disk_of(v),
                migrated: migration::of_inline_volume(v),
            };
            (volume.claim.is_some() || volume.disk.is_some() || volume.migrated.is_some())
                .then_some(volume)
        })
        .collect()
}
