//! Pod alert rules (issue 12, under way). So far: the built-in conditions and the evidence
//! each gives when it holds ([`builtin::holds`]); the episodes (fire once, resolve, `for`
//! timers, durable) are still to come.

pub mod builtin;
