//! Which replicas are alive, for balancing shards: one Lease (`{lease}-members`) whose
//! annotation `kubecast.io/members` maps each replica's identity to a heartbeat counter that
//! the replica raises every round. As with a Lease's holder, a replica counts another alive
//! while its counter keeps changing by the observer's own clock, so clocks that disagree do not
//! matter; a counter unchanged for `lease_duration` is a replica gone, and one unchanged for
//! [`FORGET_AFTER`] Leases is removed from the record. Every write names the resourceVersion
//! it read, so replicas writing at once retry instead of overwriting each other.
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
    /// Per identity, its last counter and when it was seen to change.
    seen: BTreeMap<String, (u64, Instant)>,
}

impl Members {
    /// The members of the replicas electing on `settings.name`.
    pub fn new(client: kube::Client, settings: LeaseSettings) -> Members {
        Members {
            api: Api::namespaced(client, &settings.namespace),
            name: format!("{}-members", settings.name),
            settings,
            beat: 0,
            seen: BTreeMap::new(),
        }
    }

    /// Raises this replica's heartbeat and returns the replicas alive (this one included).
    pub async fn beat(&mut self) -> Result<BTreeSet<String>, LeaseError> {
        self.write(true).await?;
        Ok(self.alive())
    }

    /// Removes this replica from the record (it stops): the others rebalance at once.
    pub async fn leave(&mut self) -> Result<(), LeaseError> {
        self.write(false).await
    }

    /// Up to [`TRIES`] read-and-writes while other replicas write in between.
    async fn write(&mut self, stay: bool) -> Result<(), LeaseError> {
        for _ in 0..TRIES {
            if self.try_beat(stay).await? {
                break;
            }
        }
        Ok(())
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
        let mut record: BTreeMap<String, u64> = current
            .as_ref()
            .and_then(|l| l.metadata.annotations.as_ref())
            .and_then(|a| a.get(ANNOTATION))
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
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
        if stay {
            // Past whatever an earlier run of this identity wrote.
            self.beat = self.beat.max(record.get(&me).copied().unwrap_or(0)) + 1;
            record.insert(me, self.beat);
        } else {
            record.remove(&me);
        }
        // A map of strings to numbers always serializes.
        let value = serde_json::to_string(&record).unwrap_or_default();
        let written = match current {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        annotations: Some([(ANNOTATION.to_string(), value)].into()),
                        ..Default::default()
                    },
                    spec: None,
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                lease
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(ANNOTATION.to_string(), value);
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
