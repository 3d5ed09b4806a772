//! CEL as the API server compiles CRD validation rules: declarations from the schema, a
//! type checker and the static cost estimator.

pub mod check;
pub mod cost;
pub mod decl;
pub mod patterns;
pub mod pod_rule;
