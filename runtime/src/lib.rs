//! What every Kubernetes-facing role of multiarch is built on, written and tested once:
//! the client, leader election, the controller loop, the backoff policy, rate limits, the
//! operations server, logging, signal handling and task supervision, the placement
//! configuration every role reads, and events on pods (every reason in one table).

pub mod backoff;
pub mod bounded_server;
pub mod byte_budget;
pub mod client;
mod connection_activity;
pub mod controller;
pub mod device_classes;
pub mod draining_queue;
pub mod event_reason;
pub mod event_recorder;
pub mod follow;
mod head_deadline;
pub mod https_server;
pub mod json_shape;
pub mod leader_election;
pub mod leader_metric;
pub mod logging;
pub mod mutual_tls;
pub mod ops_server;
pub mod peer;
pub mod placement_config;
pub mod rate_limit;
pub mod request_body;
pub mod request_deadline;
pub mod role_args;
mod served_connection;
pub mod server_limits;
pub mod serving_cert;
pub mod shutdown;
pub mod supervisor;
