//! Routes (issue 12, under way): which changes go to which sinks. So far the pieces a route's
//! filter is made of: the Kubernetes label selector ([`selector::parse`]).

pub mod selector;
