//! What every long-running role shares: logging setup and the operations HTTP server.

pub mod http;
pub mod logging;
