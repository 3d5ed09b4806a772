//! What the audit reports per architecture: how many workloads can run there and the
//! images that keep the others off, for the report and the suggestion alike.

use serde::Serialize;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchitectureSummary {
    pub architecture: String,
    /// Workloads that can run there.
    pub workloads: usize,
    /// Images without a build for it, with how many workloads each blocks there, most
    /// first.
    pub blocked_by: Vec<BlockingImage>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockingImage {
    pub image: String,
    pub workloads: usize,
}
