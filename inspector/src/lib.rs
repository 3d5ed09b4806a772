//! Image inspection: image reference → the platforms (os/architecture/variant) it has
//! builds for, from the registry itself, with the pod's pull credentials, cached.

mod address_policy;
pub mod binary_reading;
pub mod binary_reads;
pub mod body_budget;
mod bounded_fetch;
mod bounded_json;
pub mod cache;
pub mod chunked_toc;
pub mod elf_facts;
pub mod error;
pub mod executable_lookup;
pub mod grpc;
pub mod image;
pub mod image_files;
pub mod inspector;
pub mod keyring;
mod layer_decoding;
mod layer_reads;
pub mod manifest;
pub mod metrics;
mod platform_manifest;
pub mod reachability;
mod read_budget;
pub mod registry;
pub mod secrets;
pub mod settings;
pub mod settings_file;

pub use error::InspectError;
pub use image::{BinarySummary, ImageInfo, ImageRef, ManifestKind, PlatformEntry};
pub use inspector::{ImageInspector, InspectRequest, Inspector};
