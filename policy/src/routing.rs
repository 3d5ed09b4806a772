//! What multiarch-scheduler cannot place, decided once for every path: the webhook never
//! routes such a pod to the scheduler (in scheduler mode it takes the gate path instead,
//! so it still gets an architecture constraint from the default scheduler), and the
//! scheduler refuses one that names it anyway with the same words.

use k8s_openapi::api::core::v1::PodSpec;

/// A pod feature whose scheduling multiarch-scheduler does not implement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unsupported {
    /// `spec.resourceClaims`: dynamic resource allocation needs the DynamicResources
    /// plugin to allocate devices before binding.
    DynamicResourceClaims,
}

impl Unsupported {
    /// A label for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Unsupported::DynamicResourceClaims => "dynamic_resource_claims",
        }
    }

    /// What users read.
    pub fn describe(self) -> &'static str {
        match self {
            Unsupported::DynamicResourceClaims => "dynamic resource claims (spec.resourceClaims)",
        }
    }
}

/// The features of `spec` multiarch-scheduler cannot place, in a fixed order.
pub fn unsupported(spec: &PodSpec) -> Vec<Unsupported> {
    let mut found = Vec::new();
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        found.push(Unsupported::DynamicResourceClaims);
    }
    found
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
        assert!(unsupported(&PodSpec::default()).is_empty());
        let empty = PodSpec {
            resource_claims: Some(vec![]),
            ..PodSpec::default()
        };
        assert!(unsupported(&empty).is_empty());
        let claims = PodSpec {
            resource_claims: Some(vec![PodResourceClaim {
                name: "gpu".into(),
                ..PodResourceClaim::default()
            }]),
            ..PodSpec::default()
        };
        let found = unsupported(&claims);
        assert_eq!(found, [Unsupported::DynamicResourceClaims]);
        assert_eq!(
            explain(&found),
            "pod uses dynamic resource claims (spec.resourceClaims), which multiarch-scheduler \
             does not place; the admission webhook leaves such pods with the default scheduler"
        );
    }
}
