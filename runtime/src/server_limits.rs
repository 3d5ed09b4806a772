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
    /// From a request head's first byte (a connection's first request: from accept) to
    /// the complete head. Between requests a kept-alive connection waits on the idle
    /// timeout instead.
    pub header_timeout: Duration,
    /// A connection with no request in flight for this long is closed (gracefully).
    /// Longer than the clients' own (Go's `IdleConnTimeout`, 90 s, in kube-apiserver's
    /// webhook client), so that the client, not the server, gives a kept-alive
    /// connection up: a server closing it first races the client's next request on it
    /// ("broken pipe").
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
            idle_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            shutdown_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(10),
        }
    }
}
