//! Request bodies of the ports the API server calls (the admission webhook's
//! AdmissionReviews, the operator's AdmissionReviews and ConversionReviews), read within
//! a byte budget before a handler sees them: bounded each near the API server's own
//! request size, and together in flight, in all and per peer address, counting what the
//! handler may make of the body (a typed parse, priced by the body's JSON shape) with its
//! bytes. So a tenant's pod that posts
//! large reviews at the port itself holds at most its address's share, and the API
//! server's ordinary pod reviews, which are small, keep a reserve of their own even when
//! several tenants together hold the rest. A body that finds no room is answered at once
//! (429 for its address's share, 503 for the whole), never waited for.

use std::sync::Arc;

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    http::StatusCode,
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures_util::StreamExt;
use tracing::debug;

use crate::{
    byte_budget::{ByteBudget, Refusal, Reservation, SmallReserve},
    json_shape::{Prices, Shape},
    peer::Peer,
};

const MIB: usize = 1024 * 1024;

/// The largest review read: the API server refuses request bodies over 3 MiB
/// (`--max-request-bytes`), and a review wraps the object it was sent once (a CREATE) or
/// twice (an UPDATE of an object well below that), with room to spare.
pub const MAX_REVIEW_BYTES: usize = 4 * MIB;

/// The bounds of one port's request bodies.
#[derive(Debug)]
pub struct RequestBodies {
    /// One body's bytes; beyond it, 413 while it streams.
    pub max_bytes: usize,
    /// What a body's objects cost parsed, by the key that holds them.
    prices: Prices,
    budget: ByteBudget,
}

impl RequestBodies {
    /// Bodies of at most `max_bytes`, within `total` bytes in flight (`per_peer` for one
    /// address) plus `small_reserve` that only bodies costing at most `small_body` may
    /// use once the rest is spent. A body costs its bytes while it streams, then what a
    /// typed parse of it may hold ([`Shape::parsed_bytes`]).
    pub fn new(
        max_bytes: usize,
        (total, per_peer): (usize, usize),
        (small_reserve, small_body): (usize, usize),
        prices: Prices,
    ) -> Self {
        RequestBodies {
            max_bytes,
            prices,
            budget: ByteBudget::new(total, per_peer).with_small_reserve(SmallReserve {
                bytes: small_reserve,
                for_bodies_up_to: small_body,
            }),
        }
    }

    /// A review port's: 4 MiB reviews, 96 MiB in flight (32 MiB per address), and
    /// 16 MiB more for reviews that cost at most 512 KiB (a pod review costs well under
    /// that: a few KiB of JSON, a few dozen objects), objects priced by `prices`.
    pub fn for_reviews(prices: Prices) -> Self {
        RequestBodies::new(
            MAX_REVIEW_BYTES,
            (96 * MIB, 32 * MIB),
            (16 * MIB, 512 * 1024),
            prices,
        )
    }

    /// The most bytes counted at once so far.
    pub fn peak_bytes(&self) -> usize {
        self.budget.peak_bytes()
    }

    /// Reads `body` whole within the bounds, then counts what parsing it may hold; the
    /// reservation is held for the caller while it handles the body.
    pub async fn read(
        &self,
        share: &str,
        length: Option<u64>,
        body: Body,
    ) -> Result<(Bytes, Reservation), BodyRefused> {
        if length.is_some_and(|l| usize::try_from(l).map_or(true, |l| l > self.max_bytes)) {
            return Err(BodyRefused::TooLarge(self.max_bytes));
        }
        let mut reservation = Reservation::default();
        let mut read = Vec::new();
        let mut frames = body.into_data_stream();
        while let Some(chunk) = frames.next().await {
            let chunk = chunk.map_err(|e| BodyRefused::Unreadable(e.to_string()))?;
            if read.len() + chunk.len() > self.max_bytes {
                return Err(BodyRefused::TooLarge(self.max_bytes));
            }
            self.budget
                .reserve(share, chunk.len(), read.len(), &mut reservation)
                .map_err(BodyRefused::NoRoom)?;
            read.extend_from_slice(&chunk);
        }
        // Not JSON: nothing more is made of it (its parse fails at once).
        if let Some(shape) = Shape::of(&read, self.prices) {
            let parsed = shape.parsed_bytes(read.len());
            if parsed > self.budget.share_bytes() {
                return Err(BodyRefused::TooComplex {
                    objects: shape.objects,
                    bytes: parsed,
                    limit: self.budget.share_bytes(),
                });
            }
            self.budget
                .reserve(share, parsed, read.len(), &mut reservation)
                .map_err(BodyRefused::NoRoom)?;
        }
        Ok((Bytes::from(read), reservation))
    }
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyRefused {
    #[error("the request body is over {} MiB", .0 / MIB)]
    TooLarge(usize),
    #[error(
        "the request body holds {objects} JSON objects: parsed, it could take {} MiB, more than the {} MiB a request may",
        .bytes / MIB,
        .limit / MIB
    )]
    TooComplex {
        objects: usize,
        bytes: usize,
        limit: usize,
    },
    #[error(
        "too many request bytes in flight from this address: retry once the earlier requests are answered"
    )]
    NoRoom(Refusal),
    #[error("the request body could not be read: {0}")]
    Unreadable(String),
}

impl IntoResponse for BodyRefused {
    fn into_response(self) -> Response {
        let status = match &self {
            BodyRefused::TooLarge(_) | BodyRefused::TooComplex { .. } => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            BodyRefused::NoRoom(Refusal::Share) => StatusCode::TOO_MANY_REQUESTS,
            BodyRefused::NoRoom(Refusal::Total) => StatusCode::SERVICE_UNAVAILABLE,
            BodyRefused::Unreadable(_) => StatusCode::BAD_REQUEST,
        };
        let message = match &self {
            BodyRefused::NoRoom(Refusal::Total) => {
                "too many request bytes in flight: retry shortly".to_owned()
            }
            other => other.to_string(),
        };
        (status, message).into_response()
    }
}

/// Middleware: the request's body read within `bodies` (the peer's address its share),
/// held counted until the response is made.
pub async fn within_budget(
    State(bodies): State<Arc<RequestBodies>>,
    request: Request,
    next: Next,
) -> Response {
    let share = request.extensions().get::<Peer>().map_or_else(
        || "unknown".to_owned(),
        |peer| peer.address.ip().to_string(),
    );
    let length = request
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (parts, body) = request.into_parts();
    let (bytes, reservation) = match bodies.read(&share, length, body).await {
        Ok(read) => read,
        Err(refused) => {
            debug!(peer = %share, %refused, "request body refused");
            return refused.into_response();
        }
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    drop(reservation);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_shape::OBJECT_BYTES;

    /// 4 KiB bodies; 64 KiB in flight, 32 KiB per address; 8 KiB more for bodies costing
    /// at most 2 KiB.
    fn bodies() -> RequestBodies {
        RequestBodies::new(
            4 * 1024,
            (64 * 1024, 32 * 1024),
            (8 * 1024, 2 * 1024),
            Prices::ANY,
        )
    }

    /// A JSON string of `n` bytes: one value, no object.
    fn string(n: usize) -> Body {
        Body::from(format!("\"{}\"", "x".repeat(n - 2)))
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_by_its_length_or_while_it_streams() {
        let bodies = bodies();
        let declared = bodies.read("a", Some(5000), Body::empty()).await;
        assert!(matches!(declared, Err(BodyRefused::TooLarge(4096))));
        let streamed = bodies.read("a", None, Body::from(vec![b'x'; 5000])).await;
        assert!(matches!(streamed, Err(BodyRefused::TooLarge(4096))));
        assert_eq!(
            BodyRefused::TooLarge(4 * MIB).to_string(),
            "the request body is over 4 MiB"
        );
    }

    #[tokio::test]
    async fn a_body_whose_parse_could_outgrow_a_share_is_refused_by_its_shape() {
        let bodies = bodies();
        // 700 empty objects: 2.8 KB of JSON, over 2 MiB as structs.
        let empties = format!("[{}]", vec!["{}"; 700].join(","));
        let refused = bodies.read("a", None, Body::from(empties)).await;
        let Err(BodyRefused::TooComplex { objects, .. }) = &refused else {
            panic!("{refused:?}")
        };
        assert_eq!(*objects, 700);
        assert!(refused.unwrap_err().to_string().starts_with(
            "the request body holds 700 JSON objects: parsed, it could take 2 MiB, more than the 0 MiB"
        ));
        // A few objects are counted, and fit.
        let (_, held) = bodies
            .read("a", None, Body::from(r#"{"a": {}, "b": [1, 2]}"#))
            .await
            .unwrap();
        assert!(held.bytes() >= 2 * OBJECT_BYTES, "{}", held.bytes());
    }

    #[tokio::test]
    async fn bodies_in_flight_are_bounded_per_address_and_small_ones_keep_a_reserve() {
        let bodies = bodies();
        // A 4 KiB string costs 9 KiB: its bytes read (4), then parsed (5).
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(bodies.read("10.0.0.1", None, string(4096)).await.unwrap());
        }
        let refused = bodies.read("10.0.0.1", None, string(4096)).await;
        assert!(
            matches!(refused, Err(BodyRefused::NoRoom(Refusal::Share))),
            "{refused:?}"
        );
        for _ in 0..3 {
            held.push(bodies.read("10.0.0.2", None, string(4096)).await.unwrap());
        }
        held.push(bodies.read("10.0.0.3", None, string(4096)).await.unwrap());
        // 63 of 64 KiB are held: a large body of a fourth address is refused, a small
        // one is read from the reserve.
        let large = bodies.read("10.0.0.4", None, string(4096)).await;
        assert!(
            matches!(large, Err(BodyRefused::NoRoom(Refusal::Total))),
            "{large:?}"
        );
        let (small, _) = bodies.read("10.0.0.4", None, string(512)).await.unwrap();
        assert_eq!(small.len(), 512);
        held.clear();
        bodies.read("10.0.0.1", None, string(4096)).await.unwrap();
    }
}
