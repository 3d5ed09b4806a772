//! Nothing to use: this crate's dependencies make every build of the multiarch binary ask
//! the shared dependencies for the same features, so that building the full binary and the
//! node daemon's one after the other compiles those dependencies once (see its Cargo.toml).
