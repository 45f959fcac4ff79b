//! Which replicas are alive, for balancing shards: one Lease (`{lease}-members`) whose
//! annotation `kubecast.io/members` maps each replica's identity to a heartbeat counter that
//! the replica raises every round. As with a Lease's holder, a replica counts another alive
//! while its counter keeps changing by the observer's own clock, so clocks that disagree do not
//! matter; a counter unchanged for `lease_duration` is a replica gone, and one unchanged for
//! [`FORGET_AFTER`] Leases is removed from the record. Every write names the resourceVersion
//! it read, so replicas writing at once retry instead of overwriting each other.
//!
//! Each replica also announces, in a second annotation `kubecast.io/member-shards` (kept
//! apart so that the heartbeats' format stays the one earlier versions read and write), its
//! `sharding.shards`, when it joined (its own clock, written once) and the shards it runs
//! now. Replicas with different counts cut the objects into different ranges, so only one
//! count is in force at a time: that of the replica alive that joined first
//! ([`Members::generation`]). The others wait until no replica of another count runs a shard.
//!
//! Entry point: [`Members::beat`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;

use super::{LeaseError, LeaseSettings};

/// The annotation holding the heartbeats.
pub const ANNOTATION: &str = "kubecast.io/members";

/// The annotation holding each member's [`Announced`].
pub const SHARDS_ANNOTATION: &str = "kubecast.io/member-shards";

/// What a member announces of its shards.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Announced {
    /// Its `sharding.shards`.
    pub shards: u32,
    /// When it joined, in milliseconds since the epoch by its clock.
    pub since: i64,
    /// The shards it runs now (a bridge running or stopping).
    #[serde(default)]
    pub held: Vec<u32>,
}

/// What the members' record says of the shard counts, for this replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// The count in force: that of the replica alive that joined first (ties by identity).
    pub in_force: u32,
    /// The replicas alive of another count than this one's (or none announced), with what
    /// they announced.
    pub others: BTreeMap<String, Option<Announced>>,
}

impl Generation {
    /// Whether a replica alive of another count runs a shard (or announces nothing, as
    /// versions before the announcement, which may run any).
    pub fn others_hold(&self) -> bool {
        self.others
            .values()
            .any(|a| a.as_ref().is_none_or(|a| !a.held.is_empty()))
    }
}

/// How many Lease durations a silent replica stays in the record.
const FORGET_AFTER: u32 = 5;

/// Tries of one beat when other replicas write at the same time.
const TRIES: usize = 3;

/// The members' record as this replica sees it.
pub struct Members {
    api: Api<Lease>,
    settings: LeaseSettings,
    /// The Lease's name: `{lease}-members`.
    name: String,
    beat: u64,
    /// What this replica announces (its `held` set before each beat).
    announced: Announced,
    /// Per identity, its last counter and when it was seen to change.
    seen: BTreeMap<String, (u64, Instant)>,
    /// Per identity, what it announced last (none: it announced nothing, as versions before
    /// the announcement).
    others: BTreeMap<String, Announced>,
}

impl Members {
    /// The members of the replicas electing on `settings.name`; this one announces `shards`.
    pub fn new(client: kube::Client, settings: LeaseSettings, shards: u32) -> Members {
        Members {
            api: Api::namespaced(client, &settings.namespace),
            name: format!("{}-members", settings.name),
            settings,
            beat: 0,
            announced: Announced {
                shards,
                since: jiff::Timestamp::now().as_millisecond(),
                held: Vec::new(),
            },
            seen: BTreeMap::new(),
            others: BTreeMap::new(),
        }
    }

    /// The shards this replica runs, announced from its next beat on.
    pub fn set_held(&mut self, held: Vec<u32>) {
        self.announced.held = held;
    }

    /// Raises this replica's heartbeat; returns whether it was written (other replicas
    /// writing at the same time can keep it from being written for a round).
    pub async fn beat(&mut self) -> Result<bool, LeaseError> {
        self.write(true).await
    }

    /// Removes this replica from the record (it stops): the others rebalance at once.
    pub async fn leave(&mut self) -> Result<(), LeaseError> {
        self.write(false).await.map(|_| ())
    }

    /// Up to [`TRIES`] read-and-writes while other replicas write in between; whether one
    /// was written.
    async fn write(&mut self, stay: bool) -> Result<bool, LeaseError> {
        for _ in 0..TRIES {
            if self.try_beat(stay).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The shard counts of the replicas alive as of the last beat.
    pub fn generation(&self) -> Generation {
        let me = &self.settings.identity;
        let alive = self.alive();
        let mut first = (self.announced.since, me.as_str(), self.announced.shards);
        let mut others = BTreeMap::new();
        for id in alive.iter().filter(|id| *id != me) {
            let announced = self.others.get(id).cloned();
            match &announced {
                Some(a) if (a.since, id.as_str()) < (first.0, first.1) => {
                    first = (a.since, id.as_str(), a.shards);
                }
                _ => {}
            }
            if announced
                .as_ref()
                .is_none_or(|a| a.shards != self.announced.shards)
            {
                others.insert(id.clone(), announced);
            }
        }
        Generation {
            in_force: first.2,
            others,
        }
    }

    /// The replicas alive as of the last beat, this one included.
    pub fn alive(&self) -> BTreeSet<String> {
        let now = Instant::now();
        let mut alive: BTreeSet<String> = self
            .seen
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) < self.settings.lease_duration)
            .map(|(id, _)| id.clone())
            .collect();
        alive.insert(self.settings.identity.clone());
        alive
    }

    /// One read and write; `Ok(false)` when another replica wrote in between. `stay`: raise
    /// this replica's counter (else remove it).
    async fn try_beat(&mut self, stay: bool) -> Result<bool, LeaseError> {
        let now = Instant::now();
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|e| self.error(e))?;
        let annotation = |key: &str| {
            current
                .as_ref()
                .and_then(|l| l.metadata.annotations.as_ref())
                .and_then(|a| a.get(key))
        };
        let mut record: BTreeMap<String, u64> = annotation(ANNOTATION)
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        // A damaged entry reads as an announcement of nothing (the safe side: a replica
        // that may run any shard).
        let mut announced: BTreeMap<String, Announced> = annotation(SHARDS_ANNOTATION)
            .and_then(|v| serde_json::from_str::<BTreeMap<String, serde_json::Value>>(v).ok())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(id, v)| Some((id, serde_json::from_value(v).ok()?)))
            .collect();
        let me = self.settings.identity.clone();
        for (id, beat) in &record {
            if *id == me {
                continue;
            }
            let changed = self.seen.get(id).is_none_or(|(b, _)| b != beat);
            if changed {
                self.seen.insert(id.clone(), (*beat, now));
            }
        }
        self.seen.retain(|id, _| record.contains_key(id));
        let forget = self.settings.lease_duration * FORGET_AFTER;
        let silent: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) >= forget)
            .map(|(id, _)| id.clone())
            .collect();
        for id in silent {
            record.remove(&id);
            self.seen.remove(&id);
        }
        announced.retain(|id, _| record.contains_key(id) && *id != me);
        self.others = announced.clone();
        if stay {
            // Past whatever an earlier run of this identity wrote.
            self.beat = self.beat.max(record.get(&me).copied().unwrap_or(0)) + 1;
            record.insert(me.clone(), self.beat);
            announced.insert(me, self.announced.clone());
        } else {
            record.remove(&me);
        }
        // Maps of strings to numbers and plain records always serialize.
        let value = serde_json::to_string(&record).unwrap_or_default();
        let shards = serde_json::to_string(&announced).unwrap_or_default();
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        annotations: Some(
                            [
                                (ANNOTATION.to_string(), value),
                                (SHARDS_ANNOTATION.to_string(), shards),
                            ]
                            .into(),
                        ),
                        ..Default::default()
                    },
                    spec: None,
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let annotations = lease
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                annotations.insert(ANNOTATION.to_string(), value);
                annotations.insert(SHARDS_ANNOTATION.to_string(), shards);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.error(e)),
        }
    }

    fn error(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.settings.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }
}
