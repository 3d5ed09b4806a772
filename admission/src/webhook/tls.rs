//! The webhook's serving certificate: the shared runtime's, read from the mounted files
//! and reloaded when they change.

pub use multiarch_runtime::serving_cert::{TlsError, server_config};
