//! The route-and-encode stage: each classified change goes through the [`Router`] (or, with
//! no routes and no alert rules, the trivial router that sends it to every sink), whose
//! outputs become events (one per route that takes the change, in the route's data mode,
//! linking to the route's previous event; one per alert transition and route), each
//! addressed to its sinks ([`To`]), and the objects' new routing states. It returns what
//! it made ([`Emitted`]) and calls nothing back: the bridge numbers and logs the events,
//! then the states, so a crash between the two re-observes the change rather than losing an
//! event.
//!
//! Entry point: [`Routes::change`]; [`Routes::tick`] when an alert timer is due.

use std::sync::Arc;

use crate::classify::Change;
use crate::config::DataMode;
use crate::event::{Encoder, Event, alert_event};
use crate::model::ChangeKind;
use crate::route::engine::{ObjectState, Out, Routed, Router};

/// Which sinks an event goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum To {
    /// Every sink (no routes are configured).
    All,
    /// One sink: an event it had not acknowledged before a restart.
    Only(Arc<str>),
    /// The sinks of a route, as a bit set over the sinks in config order.
    Sinks(u64),
}

impl To {
    /// Whether the sink at `index` named `name` takes the event.
    pub fn includes(&self, index: usize, name: &str) -> bool {
        match self {
            To::All => true,
            To::Only(only) => &**only == name,
            To::Sinks(bits) => index < 64 && bits & (1 << index) != 0,
        }
    }
}

/// What one change (or one alert timer) became, in the order it is logged.
#[derive(Debug, Default)]
pub struct Emitted {
    /// The events and the sinks that take each; `true`: the event moves its scope's watch
    /// position (without a router, where no object state does).
    pub events: Vec<(Event, To, bool)>,
    /// The objects' routing states after the events; `true`: the state moves its scope's
    /// watch position.
    pub states: Vec<(ObjectState, bool)>,
}

/// The router, if routes or alert rules are configured, and what the stage needs to turn
/// its outputs into events.
pub struct Routes {
    router: Option<Router>,
    /// Per route: its name (which events carry), data mode and sinks.
    names: Vec<Arc<str>>,
    modes: Vec<DataMode>,
    sinks: Vec<u64>,
}

impl Routes {
    /// No routes and no alert rules: every change becomes one event for every sink.
    pub fn trivial() -> Routes {
        Routes {
            router: None,
            names: Vec::new(),
            modes: Vec::new(),
            sinks: Vec::new(),
        }
    }

    /// `feeds` gives each route's sinks as indices into the sinks in config order;
    /// `default_mode` is `encoding.data`.
    pub fn new(router: Router, feeds: &[Vec<usize>], default_mode: DataMode) -> Routes {
        let names = router
            .routes()
            .iter()
            .map(|r| Arc::from(r.name.as_str()))
            .collect();
        let modes = router
            .routes()
            .iter()
            .map(|r| r.data.unwrap_or(default_mode))
            .collect();
        // Validation allows at most 64 routes and sinks are indexed below that.
        let sinks = feeds
            .iter()
            .map(|f| f.iter().filter(|i| **i < 64).fold(0u64, |b, i| b | 1 << i))
            .collect();
        Routes {
            router: Some(router),
            names,
            modes,
            sinks,
        }
    }

    /// The router, unless the stage is trivial.
    pub fn router(&self) -> Option<&Router> {
        self.router.as_ref()
    }

    /// When the next alert timer is due (ms since the epoch).
    pub fn next_deadline(&self) -> Option<i64> {
        self.router.as_ref().and_then(Router::next_deadline)
    }

    /// Routes and encodes one change.
    pub fn change(&mut self, change: &Change, from_watch: bool, encoder: &Encoder) -> Emitted {
        // One instant for the change: its events' `time` and the alert deadlines counted
        // from it, so a `quiet` resolve is never stamped earlier than `quiet` after the
        // event that kept the episode open. The deadline is the next whole millisecond
        // (the timers' unit), never before the instant itself.
        let observed = jiff::Timestamp::now();
        let Some(router) = self.router.as_mut() else {
            let event = encode_at(encoder, change, encoder.mode(), observed);
            return Emitted {
                events: vec![(event, To::All, from_watch)],
                states: Vec::new(),
            };
        };
        let routed = router.on_change(change, ceil_ms(observed));
        self.emit(routed, Some((change, observed)), from_watch, encoder)
    }

    /// The alert timers due now fire.
    pub fn tick(&mut self, encoder: &Encoder) -> Emitted {
        match self.router.as_mut() {
            Some(router) => {
                let routed = router.tick(now_ms());
                self.emit(routed, None, false, encoder)
            }
            None => Emitted::default(),
        }
    }

    fn emit(
        &self,
        routed: Routed,
        change: Option<(&Change, jiff::Timestamp)>,
        from_watch: bool,
        encoder: &Encoder,
    ) -> Emitted {
        let mut emitted = Emitted::default();
        // The change is encoded once per data mode its routes ask for.
        let mut encoded: Vec<(DataMode, Event)> = Vec::new();
        for o in routed.outs {
            let (mut event, to) = match (o, change.as_ref()) {
                (Out::Change { route, prev_rv }, Some((change, observed))) => {
                    let mode = route.map_or(encoder.mode(), |r| self.modes[r]);
                    let event = match encoded.iter().find(|(m, _)| *m == mode) {
                        Some((_, e)) => e.clone(),
                        None => {
                            let e = encode_at(encoder, change, mode, *observed);
                            encoded.push((mode, e.clone()));
                            e
                        }
                    };
                    let event = Event { prev_rv, ..event };
                    (event, route)
                }
                (Out::Change { .. }, None) => continue,
                (
                    Out::Alert {
                        route,
                        rule,
                        transition,
                    },
                    _,
                ) => {
                    let (kind, ep) = match &*transition {
                        crate::alert::episode::Transition::Firing(ep) => {
                            (ChangeKind::AlertFiring, ep)
                        }
                        crate::alert::episode::Transition::Resolved(ep) => {
                            (ChangeKind::AlertResolved, ep)
                        }
                    };
                    let Some(rule) = self.router.as_ref().map(|r| &r.rules()[rule]) else {
                        continue;
                    };
                    let event = alert_event(encoder.cluster(), kind, ep, rule);
                    tracing::info!(id = %event.id, rule = %rule.name, severity = %rule.severity, subject = %event.subject(), "alert {}", if kind == ChangeKind::AlertFiring { "firing" } else { "resolved" });
                    (event, route)
                }
            };
            let to = match to {
                Some(r) => {
                    event.route = Some(self.names[r].clone());
                    To::Sinks(self.sinks[r])
                }
                None => To::All,
            };
            emitted.events.push((event, to, false));
        }
        for state in routed.states {
            let watched = from_watch && change.as_ref().is_some_and(|(c, _)| c.uid == state.uid);
            emitted.states.push((state, watched));
        }
        emitted
    }
}

/// Encodes `change` in data mode `mode`, observed at `observed`.
fn encode_at(
    encoder: &Encoder,
    change: &Change,
    mode: DataMode,
    observed: jiff::Timestamp,
) -> Event {
    let (event, error) = encoder.encode_at(change, mode, observed);
    if let Some(e) = error {
        tracing::warn!(id = %event.id, error = %e, "object sent as reference data");
    }
    tracing::debug!(id = %event.id, subject = %event.subject(), "event");
    event
}

/// The alerts standing for sink `sink` in `router`'s restored episodes at `now` (ms since the
/// epoch), as alert events: what a re-sending sink ([`crate::sinks::Sink::restore_alerts`])
/// sends again after a restart or a take-over. An episode whose resolve fell due while
/// kubecast was down stands resolved, as the first tick says, not firing.
pub fn standing_alerts(router: &Router, cluster: &str, sink: &str, now: i64) -> Vec<Arc<Event>> {
    let window =
        i64::try_from(crate::sinks::alertmanager::RESOLVED_RESEND.as_millis()).unwrap_or(i64::MAX);
    let names: Vec<Arc<str>> = router
        .routes()
        .iter()
        .map(|r| Arc::from(r.name.as_str()))
        .collect();
    router
        .standing(sink, now.saturating_sub(window), now)
        .into_iter()
        .filter_map(|o| match o {
            Out::Alert {
                route,
                rule,
                transition,
            } => {
                let (kind, ep) = match *transition {
                    crate::alert::episode::Transition::Firing(ep) => (ChangeKind::AlertFiring, ep),
                    crate::alert::episode::Transition::Resolved(ep) => {
                        (ChangeKind::AlertResolved, ep)
                    }
                };
                let mut event = alert_event(cluster, kind, &ep, &router.rules()[rule]);
                event.route = route.and_then(|r| names.get(r).cloned());
                Some(Arc::new(event))
            }
            Out::Change { .. } => None,
        })
        .collect()
}

/// Milliseconds since the Unix epoch, as alert deadlines are kept.
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// `at` in milliseconds since the Unix epoch, rounded up: a deadline counted from it is
/// never earlier than the same span after `at` itself.
fn ceil_ms(at: jiff::Timestamp) -> i64 {
    let ms = at.as_millisecond();
    if at.subsec_nanosecond() % 1_000_000 != 0 && ms >= 0 {
        ms + 1
    } else {
        ms
    }
}

#[cfg(test)]
mod tests {
    use super::ceil_ms;

    #[test]
    fn a_deadline_counted_from_an_instant_is_never_before_the_same_span_after_it() {
        let whole = jiff::Timestamp::from_millisecond(1_765_000_000_123).expect("in range");
        assert_eq!(
            ceil_ms(whole),
            1_765_000_000_123,
            "a whole millisecond stays"
        );
        for nanos in [1, 400_000, 999_999] {
            let at = whole + jiff::SignedDuration::from_nanos(nanos);
            let deadline = jiff::Timestamp::from_millisecond(ceil_ms(at) + 4000).expect("in range");
            assert!(
                deadline.duration_since(at) >= jiff::SignedDuration::from_secs(4),
                "{at}"
            );
            assert!(
                deadline.duration_since(at) < jiff::SignedDuration::from_millis(4001),
                "{at}"
            );
        }
    }
}
