//! Which replicas are alive, for balancing shards: one Lease (`{lease}-members`) whose
//! annotation `kubecast.io/members` maps each replica's identity to a heartbeat counter that
//! the replica raises every round. As with a Lease's holder, a replica counts another alive
//! while its counter keeps changing by the observer's own clock, so clocks that disagree do not
//! matter; a counter unchanged for `lease_duration` is a replica gone, and one unchanged for
//! [`FORGET_AFTER`] Leases is removed from the record. Every write names the resourceVersion
//! it read, so replicas writing at once retry instead of overwriting each other.
//!
//! Each replica also announces its `sharding.shards` in a second annotation,
//! `kubecast.io/member-shards` (identity to count; kept apart so that the heartbeats' format
//! stays the one earlier versions read and write): replicas with different counts cut the
//! objects into different ranges, so none takes a shard while another count is announced
//! ([`Members::other_counts`]).
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

/// The annotation holding each member's shard count.
pub const SHARDS_ANNOTATION: &str = "kubecast.io/member-shards";

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
    /// The shard count this replica announces.
    shards: u32,
    /// Per identity, its last counter and when it was seen to change.
    seen: BTreeMap<String, (u64, Instant)>,
    /// Per identity, the shard count it announced last (none: it announced none, as versions
    /// before the announcement).
    counts: BTreeMap<String, u32>,
}

impl Members {
    /// The members of the replicas electing on `settings.name`; this one announces `shards`.
    pub fn new(client: kube::Client, settings: LeaseSettings, shards: u32) -> Members {
        Members {
            api: Api::namespaced(client, &settings.namespace),
            name: format!("{}-members", settings.name),
            settings,
            beat: 0,
            shards,
            seen: BTreeMap::new(),
            counts: BTreeMap::new(),
        }
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

    /// The replicas alive as of the last beat (this one left out) that announce another
    /// shard count than this one's, with the count they announce (`None`: none).
    pub fn other_counts(&self) -> BTreeMap<String, Option<u32>> {
        let me = &self.settings.identity;
        self.alive()
            .into_iter()
            .filter(|id| id != me)
            .map(|id| {
                let count = self.counts.get(&id).copied();
                (id, count)
            })
            .filter(|(_, count)| *count != Some(self.shards))
            .collect()
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
                .and_then(|v| serde_json::from_str::<BTreeMap<String, u64>>(v).ok())
                .unwrap_or_default()
        };
        let mut record = annotation(ANNOTATION);
        // A count beyond u32 is no count this version announces: read as none.
        let mut counts: BTreeMap<String, u32> = annotation(SHARDS_ANNOTATION)
            .into_iter()
            .filter_map(|(id, n)| Some((id, u32::try_from(n).ok()?)))
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
        counts.retain(|id, _| record.contains_key(id) || *id == me);
        if stay {
            // Past whatever an earlier run of this identity wrote.
            self.beat = self.beat.max(record.get(&me).copied().unwrap_or(0)) + 1;
            record.insert(me.clone(), self.beat);
            counts.insert(me, self.shards);
        } else {
            record.remove(&me);
            counts.remove(&me);
        }
        self.counts = counts.clone();
        // Maps of strings to numbers always serialize.
        let value = serde_json::to_string(&record).unwrap_or_default();
        let shards = serde_json::to_string(&counts).unwrap_or_default();
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
                let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
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
