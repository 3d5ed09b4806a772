//! Who is on the other end of a served request.

use std::net::SocketAddr;

/// Who is on the other end of a request's connection: put in every request's extensions,
/// for handlers that bound or authorize by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub address: SocketAddr,
    /// The client presented a certificate the port's TLS verifier accepted (a port that
    /// verifies client certificates; never true on plain HTTP).
    pub verified_client_certificate: bool,
}
