//! In-tree volume types and the CSI drivers they migrate to (kube's csi-translation-lib),
//! reduced to what attach limits need: the driver and a handle unique per volume.

use k8s_openapi::api::core::v1 as core;

use super::CsiVolume;

/// An attachable in-tree volume: its plugin name and its CSI identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigratedVolume {
    pub plugin: &'static str,
    pub csi: CsiVolume,
}

fn migrated(plugin: &'static str, driver: &str, handle: &str) -> Option<MigratedVolume> {
    Some(MigratedVolume {
        plugin,
        csi: CsiVolume {
            driver: driver.to_owned(),
            handle: handle.to_owned(),
        },
    })
}

/// The in-tree source of a PersistentVolume, if it is one CSI migration covers.
pub fn of_persistent_volume(spec: &core::PersistentVolumeSpec) -> Option<MigratedVolume> {
    if let Some(pd) = &spec.gce_persistent_disk {
        return migrated("kubernetes.io/gce-pd", "pd.csi.storage.gke.io", &pd.pd_name);
    }
    if let Some(ebs) = &spec.aws_elastic_block_store {
        return migrated("kubernetes.io/aws-ebs", "ebs.csi.aws.com", &ebs.volume_id);
    }
    if let Some(disk) = &spec.azure_disk {
        return migrated(
            "kubernetes.io/azure-disk",
            "disk.csi.azure.com",
            &disk.disk_uri,
        );
    }
    if let Some(cinder) = &spec.cinder {
        return migrated(
            "kubernetes.io/cinder",
            "cinder.csi.openstack.org",
            &cinder.volume_id,
        );
    }
    if let Some(vsphere) = &spec.vsphere_volume {
        return migrated(
            "kubernetes.io/vsphere-volume",
            "csi.vsphere.vmware.com",
            &vsphere.volume_path,
        );
    }
    if let Some(px) = &spec.portworx_volume {
        return migrated(
            "kubernetes.io/portworx-volume",
            "pxd.portworx.com",
            &px.volume_id,
        );
    }
    None
}

/// The same for a volume written inline in a pod.
pub fn of_inline_volume(volume: &core::Volume) -> Option<MigratedVolume> {
    if let Some(pd) = &volume.gce_persistent_disk {
        return migrated("kubernetes.io/gce-pd", "pd.csi.storage.gke.io", &pd.pd_name);
    }
    if let Some(ebs) = &volume.aws_elastic_block_store {
        return migrated("kubernetes.io/aws-ebs", "ebs.csi.aws.com", &ebs.volume_id);
    }
    if let Some(disk) = &volume.azure_disk {
        return migrated(
            "kubernetes.io/azure-disk",
            "disk.csi.azure.com",
            &disk.disk_uri,
        );
    }
    if let Some(cinder) = &volume.cinder {
        return migrated(
            "kubernetes.io/cinder",
            "cinder.csi.openstack.org",
            &cinder.volume_id,
        );
    }
    if let Some(vsphere) = &volume.vsphere_volume {
        return migrated(
            "kubernetes.io/vsphere-volume",
            "csi.vsphere.vmware.com",
            &vsphere.volume_path,
        );
    }
    if let Some(px) = &volume.portworx_volume {
        return migrated(
            "kubernetes.io/portworx-volume",
            "pxd.portworx.com",
            &px.volume_id,
        );
    }
    None
}

/// The CSI driver an in-tree provisioner name migrates to (a StorageClass of an unbound
/// claim may still name the in-tree provisioner).
pub fn driver_of_provisioner(provisioner: &str) -> Option<(&'static str, &'static str)> {
    match provisioner {
        "kubernetes.io/gce-pd" => Some(("kubernetes.io/gce-pd", "pd.csi.storage.gke.io")),
        "kubernetes.io/aws-ebs" => Some(("kubernetes.io/aws-ebs", "ebs.csi.aws.com")),
        "kubernetes.io/azure-disk" => Some(("kubernetes.io/azure-disk", "disk.csi.azure.com")),
        "kubernetes.io/cinder" => Some(("kubernetes.io/cinder", "cinder.csi.openstack.org")),
        "kubernetes.io/vsphere-volume" => {
            Some(("kubernetes.io/vsphere-volume", "csi.vsphere.vmware.com"))
        }
        "kubernetes.io/portworx-volume" => {
            Some(("kubernetes.io/portworx-volume", "pxd.portworx.com"))
        }
        _ => None,
    }
}
