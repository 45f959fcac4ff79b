//! Events for the replay's unit tests.

use cloudevents::{Event, EventBuilder, EventBuilderV10};
use serde_json::Value;

use super::state::{LastEvent, PodAt};

/// An object of `kind` named `shop/NAME` in `cluster`, as `--state-at` keeps it, with `data`.
pub fn pod(cluster: &str, kind: &str, name: &str, data: Value) -> PodAt {
    PodAt {
        cluster: Some(cluster.into()),
        kind: kind.into(),
        api_version: "v1".into(),
        namespace: "shop".into(),
        name: name.into(),
        uid: format!("{cluster}-{name}"),
        resource_version: "1".into(),
        phase: None,
        node: None,
        last_event: LastEvent {
            id: String::new(),
            ty: String::new(),
            time: String::new(),
        },
        data,
    }
}

/// A kubecast event of `ty` (`added`, `modified`, `deleted`, `firing`, `resolved`) about
/// Pod `ns/web` (uid `u1`) at `rv`, `ms` after the epoch's first day.
pub fn event(ty: &str, rv: &str, ms: i64, data: Value, extra: &[(&str, &str)]) -> Event {
    event_in("test", ty, rv, ms, data, extra)
}

/// The same in cluster `cluster`.
pub fn event_in(
    cluster: &str,
    ty: &str,
    rv: &str,
    ms: i64,
    data: Value,
    extra: &[(&str, &str)],
) -> Event {
    let (full, id) = match ty {
        "firing" | "resolved" => (
            format!("io.kubecast.alert.{ty}"),
            format!("u1:1:alert:crashloop:{ty}"),
        ),
        _ => (format!("io.k8s.core.v1.pod.{ty}"), format!("u1:{rv}:{ty}")),
    };
    let time = jiff::Timestamp::from_millisecond(86_400_000 + ms).expect("a time");
    let mut b = EventBuilderV10::new()
        .id(id)
        .source(format!("k8s://{cluster}/api/v1/namespaces/ns/pods"))
        .ty(full)
        .time(time.to_string())
        .subject("ns/web")
        .extension("k8suid", "u1")
        .extension("k8snamespace", "ns")
        .extension("k8sname", "web")
        .extension("k8srv", rv)
        .data("application/json", data);
    for (k, v) in extra {
        b = b.extension(k, *v);
    }
    b.build().expect("a valid event")
}
