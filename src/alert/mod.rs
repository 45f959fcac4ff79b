//! Pod alert rules (issue 12, under way). So far: the built-in conditions and the evidence
//! each gives when it holds ([`builtin::holds`]), and episodes (fire once after `for`,
//! resolve once, deterministic ids, deadlines that survive a restart: [`episode::Episodes`]).
//! Not yet wired into the pipeline or the config.

pub mod builtin;
pub mod episode;
