//! The API server's custom-resource machinery, as far as multiarch's tests need it: the
//! checks a CustomResourceDefinition must pass to be created (`crd_create`), and what
//! happens to a custom resource written through it (`custom_resource`: pruning, defaults,
//! OpenAPI validation and CEL rules).

pub use multiarch_crd::cel;
pub mod cel_rules;
pub mod crd_create;
pub mod custom_resource;
pub mod field_error;
pub mod schema_values;

pub use crd_create::{CrdReport, check_crd};
pub use field_error::{FieldError, invalid_status};
