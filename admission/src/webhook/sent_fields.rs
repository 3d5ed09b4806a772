//! The fields of a reviewed pod that the webhook's patches may write, as sent.

use serde_json::Value;

/// The fields of the object a patch may write, exactly as the API server sent them (the
/// typed pod may read them differently: unknown fields dropped, defaults), and whether
/// their parents are there. Read without the rest of the object: a review is parsed once
/// typed and once for these, never into a tree of the whole object.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
pub struct SentFields {
    #[serde(default)]
    metadata: Option<SentMetadata>,
    #[serde(default)]
    spec: Option<SentSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
struct SentMetadata {
    #[serde(default)]
    annotations: Option<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SentSpec {
    #[serde(default)]
    affinity: Option<Value>,
    #[serde(default)]
    node_selector: Option<Value>,
}

/// A field a patch may write: `parent.field`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SentField {
    Annotations,
    Affinity,
    NodeSelector,
}

impl SentField {
    /// The JSON pointer of the field, and of its parent.
    pub fn pointer(self) -> (&'static str, &'static str) {
        match self {
            SentField::Annotations => ("/metadata/annotations", "/metadata"),
            SentField::Affinity => ("/spec/affinity", "/spec"),
            SentField::NodeSelector => ("/spec/nodeSelector", "/spec"),
        }
    }
}

impl SentFields {
    /// The fields of an object given whole (tests, recorded reviews).
    pub fn of(object: &Value) -> Self {
        serde_json::from_value(object.clone()).unwrap_or_default()
    }

    /// Whether the field's parent (`metadata`, `spec`) was sent.
    pub fn has_parent(&self, field: SentField) -> bool {
        match field {
            SentField::Annotations => self.metadata.is_some(),
            SentField::Affinity | SentField::NodeSelector => self.spec.is_some(),
        }
    }

    /// The field as sent; `None` when absent or null.
    pub fn get(&self, field: SentField) -> Option<&Value> {
        match field {
            SentField::Annotations => self.metadata.as_ref()?.annotations.as_ref(),
            SentField::Affinity => self.spec.as_ref()?.affinity.as_ref(),
            SentField::NodeSelector => self.spec.as_ref()?.node_selector.as_ref(),
        }
    }
}

/// Only the object of a review, for [`SentFields`].
#[derive(serde::Deserialize)]
pub(super) struct SentReview {
    #[serde(default)]
    pub(super) request: Option<SentRequest>,
}

#[derive(serde::Deserialize)]
pub(super) struct SentRequest {
    #[serde(default)]
    pub(super) object: Option<SentFields>,
}
