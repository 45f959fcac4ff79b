//! The three routes the benches that measure the router use: everything, a label-selected
//! slice on change aspects, and a namespace-globbed slice on one path.

use std::collections::BTreeMap;

use kubecast::route::config::{Route, RouteConfig};

const ROUTES: &str = r#"
audit: {sinks: [a]}
payments: {sinks: [b], selector: 'team in (payments), app.kubernetes.io/name', changes: [phase, readiness, restart_counts]}
edge: {sinks: [c], namespaces: ['edge-*', 'prod-?'], changes: ['status.podIP'], types: [modified, alerts]}
"#;

/// The three routes, validated for sinks `a`, `b` and `c` over Pods.
pub fn three_routes() -> Vec<Route> {
    let map: BTreeMap<String, RouteConfig> =
        serde_saphyr::from_str(ROUTES).expect("the bench's routes parse");
    map.iter()
        .map(|(n, r)| {
            r.validate(n, &["a", "b", "c"], &["pods"])
                .expect("the bench's routes are valid")
        })
        .collect()
}
