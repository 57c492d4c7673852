//! Fault drills for the golden Memcached operator: the tests in `tests/` break one part of a simulated
//! cluster while the operator converges a wave of `Memcached` objects, then check the end state.
//!
//! Run them with `make test-drills` from the repository root (it builds the operator first and passes
//! its path in [`OPERATOR_ENV`]). docs/reliability.md says what each drill proves.

/// The environment variable naming the operator binary (`project`, built from testdata/project).
pub const OPERATOR_ENV: &str = "DRILLS_OPERATOR";
