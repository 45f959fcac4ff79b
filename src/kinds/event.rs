//! core/v1 Events (what controllers and kubelets report): the summary is the report itself,
//! the kubernetes-event-exporter view: type, reason, message, the object it is about, how
//! often and when, and who reported it.

use serde_json::{Value, json};

use super::{Kind, Resource};

/// core/v1 Event.
pub struct CoreEvent;

impl Kind for CoreEvent {
    fn summary(&self, obj: &Value, r: &Resource) -> Value {
        let mut m = super::identity(obj, r);
        let o = &obj["involvedObject"];
        // Events written through events.k8s.io/v1 carry `series` and `eventTime` instead of
        // `count` and the timestamps of the core API.
        let count = obj["count"]
            .as_u64()
            .or_else(|| obj["series"]["count"].as_u64())
            .unwrap_or(1);
        let first = first_present(&[&obj["firstTimestamp"], &obj["eventTime"]]);
        let last = first_present(&[
            &obj["lastTimestamp"],
            &obj["series"]["lastObservedTime"],
            &obj["eventTime"],
        ]);
        let controller = first_present(&[&obj["reportingComponent"], &obj["source"]["component"]]);
        for (k, v) in [
            ("type", obj["type"].clone()),
            ("reason", obj["reason"].clone()),
            ("message", obj["message"].clone()),
            (
                "involvedObject",
                json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "namespace": o["namespace"],
                    "name": o["name"], "uid": o["uid"], "fieldPath": o["fieldPath"]}),
            ),
            ("count", json!(count)),
            ("firstTime", first),
            ("lastTime", last),
            ("reportingController", controller),
        ] {
            m.insert(k.into(), v);
        }
        Value::Object(m)
    }
}

/// The first of `values` that is a non-empty string, else null.
fn first_present(values: &[&Value]) -> Value {
    values
        .iter()
        .find(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        .map(|v| (*v).clone())
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_summary_is_the_report_and_the_object_it_is_about() {
        let e = json!({"metadata": {"namespace": "ns", "name": "web.1", "uid": "u", "resourceVersion": "9"},
            "type": "Warning", "reason": "FailedScheduling", "message": "0/1 nodes",
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "web", "uid": "p"},
            "count": 3, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z",
            "reportingComponent": "", "source": {"component": "default-scheduler"}});
        let s = CoreEvent.summary(&e, &Resource::new("", "v1", "Event", "events", true));
        assert_eq!(s["reason"], "FailedScheduling");
        assert_eq!(s["involvedObject"]["name"], "web");
        assert_eq!(s["count"], 3);
        assert_eq!(s["lastTime"], "2026-01-01T00:05:00Z");
        assert_eq!(s["reportingController"], "default-scheduler");
    }

    #[test]
    fn an_event_of_the_new_api_reads_its_series_and_event_time() {
        let e = json!({"metadata": {"name": "x"}, "type": "Normal", "reason": "Scaled",
            "eventTime": "2026-01-01T00:00:00.000000Z", "series": {"count": 7, "lastObservedTime": "2026-01-01T00:09:00Z"},
            "reportingComponent": "deployment-controller"});
        let s = CoreEvent.summary(&e, &Resource::new("", "v1", "Event", "events", true));
        assert_eq!(s["count"], 7);
        assert_eq!(s["firstTime"], "2026-01-01T00:00:00.000000Z");
        assert_eq!(s["lastTime"], "2026-01-01T00:09:00Z");
        assert_eq!(s["reportingController"], "deployment-controller");
    }
}
