//! What multiarch-scheduler cannot place, decided once for every path: the webhook never
//! routes such a pod to the scheduler (in scheduler mode it takes the gate path instead,
//! so it still gets an architecture constraint from the default scheduler), and the
//! scheduler refuses one that names it anyway with the same words.

use k8s_openapi::api::core::v1::PodSpec;

use crate::device_class_resources::DeviceClassResources;

/// A pod feature whose scheduling multiarch-scheduler does not implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unsupported {
    /// `spec.resourceClaims`: dynamic resource allocation needs the DynamicResources
    /// plugin to allocate devices before binding.
    DynamicResourceClaims,
    /// A container requests `deviceclass.resource.kubernetes.io/<class>`, or a name a
    /// DeviceClass maps with `spec.extendedResourceName`: an extended resource a
    /// DeviceClass provides (DRAExtendedResource, on by default since 1.36), allocated by
    /// kube-scheduler's DynamicResources plugin.
    DeviceClassExtendedResources,
}

/// The prefix of the extended resource every DeviceClass provides by its name
/// (`resourceapi.ResourceDeviceClassPrefix`).
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

impl Unsupported {
    /// A label for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Unsupported::DynamicResourceClaims => "dynamic_resource_claims",
            Unsupported::DeviceClassExtendedResources => "device_class_extended_resources",
        }
    }

    /// What users read.
    pub fn describe(self) -> &'static str {
        match self {
            Unsupported::DynamicResourceClaims => "dynamic resource claims (spec.resourceClaims)",
            Unsupported::DeviceClassExtendedResources => {
                "extended resources of a DeviceClass (deviceclass.resource.kubernetes.io/... or a DeviceClass's extendedResourceName)"
            }
        }
    }
}

/// The features of `spec` multiarch-scheduler cannot place, in a fixed order, with the
/// names the cluster's DeviceClasses map (`mapped`).
pub fn unsupported(spec: &PodSpec, mapped: &DeviceClassResources) -> Vec<Unsupported> {
    let mut found = Vec::new();
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        found.push(Unsupported::DynamicResourceClaims);
    }
    if requested_resources(spec).any(|name| is_device_class_resource(name, mapped)) {
        found.push(Unsupported::DeviceClassExtendedResources);
    }
    found
}

/// Whether the extended resource `name` is a DeviceClass's: by its prefix, or mapped.
pub fn is_device_class_resource(name: &str, mapped: &DeviceClassResources) -> bool {
    name.starts_with(DEVICE_CLASS_RESOURCE_PREFIX) || mapped.maps(name)
}

/// What a container or init container requests (or limits: an extended resource's
/// request defaults to its limit).
fn requested_resources(spec: &PodSpec) -> impl Iterator<Item = &str> {
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| {
            r.requests
                .iter()
                .chain(r.limits.iter())
                .flat_map(|m| m.keys())
        })
        .map(String::as_str)
}

/// The sentence the scheduler's refusal and the webhook's log share.
pub fn explain(features: &[Unsupported]) -> String {
    let names: Vec<&str> = features.iter().map(|f| f.describe()).collect();
    format!(
        "pod uses {}, which multiarch-scheduler does not place; the admission webhook leaves \
         such pods with the default scheduler",
        names.join(" and ")
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodResourceClaim;

    use super::*;

    #[test]
    fn resource_claims_are_unsupported_and_explained() {
        let none = DeviceClassResources::default();
        assert!(unsupported(&PodSpec::default(), &none).is_empty());
        let empty = PodSpec {
            resource_claims: Some(vec![]),
            ..PodSpec::default()
        };
        assert!(unsupported(&empty, &none).is_empty());
        let claims = PodSpec {
            resource_claims: Some(vec![PodResourceClaim {
                name: "gpu".into(),
                ..PodResourceClaim::default()
            }]),
            ..PodSpec::default()
        };
        let found = unsupported(&claims, &none);
        assert_eq!(found, [Unsupported::DynamicResourceClaims]);
        assert_eq!(found[0].as_str(), "dynamic_resource_claims");
        assert_eq!(
            explain(&found),
            "pod uses dynamic resource claims (spec.resourceClaims), which multiarch-scheduler \
             does not place; the admission webhook leaves such pods with the default scheduler"
        );
    }

    fn with_resource(init: bool, limits: bool, name: &str) -> PodSpec {
        use std::collections::BTreeMap;

        use k8s_openapi::{
            api::core::v1::{Container, ResourceRequirements},
            apimachinery::pkg::api::resource::Quantity,
        };
        let amounts: BTreeMap<String, Quantity> = [(name.to_owned(), Quantity("1".into()))].into();
        let container = Container {
            name: "c".into(),
            resources: Some(if limits {
                ResourceRequirements {
                    limits: Some(amounts),
                    ..ResourceRequirements::default()
                }
            } else {
                ResourceRequirements {
                    requests: Some(amounts),
                    ..ResourceRequirements::default()
                }
            }),
            ..Container::default()
        };
        let plain = Container {
            name: "plain".into(),
            ..Container::default()
        };
        if init {
            PodSpec {
                containers: vec![plain],
                init_containers: Some(vec![container]),
                ..PodSpec::default()
            }
        } else {
            PodSpec {
                containers: vec![plain, container],
                ..PodSpec::default()
            }
        }
    }

    #[test]
    fn a_device_class_s_extended_resource_is_unsupported_wherever_it_is_asked_for() {
        for (init, limits) in [(false, false), (false, true), (true, false), (true, true)] {
            let spec = with_resource(
                init,
                limits,
                "deviceclass.resource.kubernetes.io/gpu.example.com",
            );
            assert_eq!(
                unsupported(&spec, &DeviceClassResources::default()),
                [Unsupported::DeviceClassExtendedResources],
                "init {init}, limits {limits}"
            );
            // A name a DeviceClass maps, wherever it is asked for.
            let mapped = DeviceClassResources::of([("gpu.example.com", Some("example.com/gpu"))]);
            assert_eq!(
                unsupported(&with_resource(init, limits, "example.com/gpu"), &mapped),
                [Unsupported::DeviceClassExtendedResources],
                "mapped, init {init}, limits {limits}"
            );
        }
        // A device plugin's extended resource is NodeResourcesFit's, as in kube-scheduler,
        // unless a DeviceClass maps its name.
        let plugin_gpu = with_resource(false, false, "nvidia.com/gpu");
        assert!(unsupported(&plugin_gpu, &DeviceClassResources::default()).is_empty());
        let other = DeviceClassResources::of([("gpu.example.com", Some("example.com/gpu"))]);
        assert!(unsupported(&plugin_gpu, &other).is_empty());
        assert_eq!(
            explain(&[Unsupported::DeviceClassExtendedResources]),
            "pod uses extended resources of a DeviceClass (deviceclass.resource.kubernetes.io/... \
             or a DeviceClass's extendedResourceName), which multiarch-scheduler does not place; \
             the admission webhook leaves such pods with the default scheduler"
        );
    }
}
