// Empty: cargo builds a crate's build dependencies only when it has a build script, and the
// proc macros' shared dependencies are unified through them (see Cargo.toml).
fn main() {}
