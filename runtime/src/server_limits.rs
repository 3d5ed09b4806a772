//! What a served port lets a client hold, and how it shuts down: the numbers
//! `bounded_server` and each connection (`served_connection`) enforce.

use std::time::Duration;

/// What a client may hold, and how the port shuts down.
#[derive(Clone, Copy, Debug)]
pub struct ServerLimits {
    /// Connections at once; beyond it new ones are closed at accept.
    pub max_connections: usize,
    /// Connections at once from one address: one tenant's pod cannot take them all.
    pub max_connections_per_peer: usize,
    /// From accept to a finished TLS handshake.
    pub handshake_timeout: Duration,
    /// From connection (or the previous response) to a complete request head.
    pub header_timeout: Duration,
    /// A connection with no request in flight for this long is closed (gracefully).
    pub idle_timeout: Duration,
    /// From a request's head to its response, body included: a slow body gets 408.
    pub request_timeout: Duration,
    /// After shutdown is asked, how long the port goes on serving (and accepting) while
    /// `/readyz` answers 503, so that the endpoint leaves its Service before the
    /// listener closes.
    pub shutdown_delay: Duration,
    /// Then, how long open connections get to finish their requests.
    pub drain_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_connections: 4096,
            max_connections_per_peer: 256,
            handshake_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            request_timeout: Duration::from_secs(30),
            shutdown_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(10),
        }
    }
}
