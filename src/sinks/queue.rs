//! A sink's bounded in-memory queue, limited in events and in bytes, with a policy for when
//! it is full: `block` (the pipeline waits, and so the watch), `coalesce` (a pod's queued
//! `modified` event is replaced by its newer one; added and deleted are never dropped, and
//! when nothing can be coalesced the pipeline waits) or `drop` (the new event is dropped and
//! counted).
//!
//! Entry point: [`queue`], which returns the pipeline's [`QueueTx`] and the sink's
//! [`QueueRx`]. A coalesced event takes the place, and the sequence number, of the one it
//! replaces, so acknowledgements still come in sequence order and the durable cursor never
//! passes an event still queued.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::event::{Compat, Event};
use crate::model::ChangeKind;

/// A sink's queue settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Events the queue holds at most. Default: 1024.
    #[serde(default = "default_events")]
    pub events: usize,
    /// Bytes of event data the queue holds at most (one event is always let in). Default:
    /// 67108864 (64 MiB).
    #[serde(default = "default_bytes")]
    pub bytes: usize,
    /// What happens when it is full: `block`, `coalesce` or `drop`. Default: `block`.
    #[serde(default)]
    pub when_full: WhenFull,
}

fn default_events() -> usize {
    1024
}
fn default_bytes() -> usize {
    64 << 20
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            events: default_events(),
            bytes: default_bytes(),
            when_full: WhenFull::default(),
        }
    }
}

/// The full-queue policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenFull {
    /// Wait: backpressure into the watch. Nothing is lost.
    #[default]
    Block,
    /// Keep only the latest queued `modified` event per pod; wait when that frees nothing.
    Coalesce,
    /// Drop the new event (counted, logged): this sink loses it.
    Drop,
}

/// What became of a pushed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// It replaced the pod's older queued `modified` event.
    Coalesced,
    Dropped,
}

/// The sink side is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

struct State {
    items: VecDeque<Arc<Event>>,
    bytes: usize,
    /// Position of `items[0]` in the stream of queued events.
    front: u64,
    /// Per pod uid, the position of its queued `modified` event (coalesce only).
    modified_at: HashMap<String, u64>,
    sender_gone: bool,
    receiver_gone: bool,
}

impl State {
    /// Takes the oldest event, keeping the byte count and the coalescing index right.
    fn pop(&mut self) -> Option<Arc<Event>> {
        let e = self.items.pop_front()?;
        let pos = self.front;
        self.front += 1;
        self.bytes -= size(&e);
        if self.modified_at.get(e.object.uid.as_str()) == Some(&pos) {
            self.modified_at.remove(e.object.uid.as_str());
        }
        Some(e)
    }
}

struct Shared {
    state: Mutex<State>,
    readable: Notify,
    writable: Notify,
    config: QueueConfig,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock would be a bug in this module; the state is still
        // consistent between statements, so go on with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn size(e: &Event) -> usize {
    e.data.len() + 256
}

/// A new queue with `config`.
pub fn queue(config: QueueConfig) -> (QueueTx, QueueRx) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            bytes: 0,
            front: 0,
            modified_at: HashMap::new(),
            sender_gone: false,
            receiver_gone: false,
        }),
        readable: Notify::new(),
        writable: Notify::new(),
        config,
    });
    (
        QueueTx {
            shared: shared.clone(),
        },
        QueueRx {
            shared,
            compat: CompatShape::default(),
        },
    )
}

/// The pipeline's side.
pub struct QueueTx {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for QueueTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueTx")
    }
}

/// Why [`QueueTx::try_push`] did not take an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotPushed {
    /// The queue is full and its policy is to wait: try again after [`QueueTx::push`] or
    /// later.
    Full,
    /// The sink side is gone.
    Closed,
}

impl QueueTx {
    /// Queues `event` as the policy says, without waiting.
    pub fn try_push(&self, event: &Arc<Event>) -> Result<Pushed, NotPushed> {
        let c = &self.shared.config;
        let mut st = self.shared.lock();
        if st.receiver_gone {
            return Err(NotPushed::Closed);
        }
        if c.when_full == WhenFull::Coalesce
            && event.kind == ChangeKind::Modified
            && let Some(pos) = st.modified_at.get(event.object.uid.as_str()).copied()
        {
            let idx = (pos - st.front) as usize;
            let old = st.items[idx].clone();
            let mut newer = (**event).clone();
            newer.seq = old.seq;
            st.bytes = st.bytes - size(&old) + size(&newer);
            st.items[idx] = Arc::new(newer);
            return Ok(Pushed::Coalesced);
        }
        let n = size(event);
        if st.items.len() < c.events && (st.items.is_empty() || st.bytes + n <= c.bytes) {
            let pos = st.front + st.items.len() as u64;
            match event.kind {
                ChangeKind::Modified if c.when_full == WhenFull::Coalesce => {
                    st.modified_at.insert(event.object.uid.clone(), pos);
                }
                _ => {
                    st.modified_at.remove(event.object.uid.as_str());
                }
            }
            st.bytes += n;
            st.items.push_back(event.clone());
            self.shared.readable.notify_one();
            return Ok(Pushed::Queued);
        }
        if c.when_full == WhenFull::Drop {
            return Ok(Pushed::Dropped);
        }
        Err(NotPushed::Full)
    }

    /// Queues `event` as the policy says, waiting while the queue is full (except `drop`).
    /// Cancel-safe: dropped before it completes, it has queued nothing.
    pub async fn push(&self, event: Arc<Event>) -> Result<Pushed, Closed> {
        loop {
            let notified = self.shared.writable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_push(&event) {
                Ok(p) => return Ok(p),
                Err(NotPushed::Closed) => return Err(Closed),
                Err(NotPushed::Full) => notified.await,
            }
        }
    }
}

impl Drop for QueueTx {
    fn drop(&mut self) {
        self.shared.lock().sender_gone = true;
        self.shared.readable.notify_one();
    }
}

/// The sink's side.
pub struct QueueRx {
    shared: Arc<Shared>,
    compat: CompatShape,
}

/// Which events leave the queue in a compatibility shape ([`Compat`]): all of them (`compat`
/// on the sink), or those of the routes that set one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompatShape {
    pub all: Option<Compat>,
    pub routes: Vec<(Arc<str>, Compat)>,
}

impl CompatShape {
    /// The shape of `event`, if any.
    fn of(&self, event: &Event) -> Option<Compat> {
        self.all.or_else(|| {
            let route = event.route.as_deref()?;
            self.routes
                .iter()
                .find(|(r, _)| &**r == route)
                .map(|(_, c)| *c)
        })
    }
}

impl QueueRx {
    /// Events leave this queue in the compatibility shape `compat` says.
    pub fn with_compat(mut self, compat: CompatShape) -> QueueRx {
        self.compat = compat;
        self
    }

    fn shaped(&self, e: Arc<Event>) -> Arc<Event> {
        match self.compat.of(&e) {
            None => e,
            Some(c) => Arc::new(Event {
                compat: Some(c),
                ..(*e).clone()
            }),
        }
    }

    /// The next event; `None` once the pipeline closed the queue and it is empty.
    pub async fn recv(&mut self) -> Option<Arc<Event>> {
        loop {
            let notified = self.shared.readable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.shared.lock();
                if let Some(e) = st.pop() {
                    self.shared.writable.notify_one();
                    drop(st);
                    return Some(self.shaped(e));
                }
                if st.sender_gone {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Waits for at least one event, then takes up to `limit` into `buf`; 0 when closed.
    pub async fn recv_many(&mut self, buf: &mut Vec<Arc<Event>>, limit: usize) -> usize {
        let Some(first) = self.recv().await else {
            return 0;
        };
        buf.push(first);
        let mut st = self.shared.lock();
        let from = buf.len();
        while buf.len() < limit {
            match st.pop() {
                Some(e) => buf.push(e),
                None => break,
            }
        }
        self.shared.writable.notify_one();
        drop(st);
        if self.compat != CompatShape::default() {
            for e in &mut buf[from..] {
                *e = self.shaped(e.clone());
            }
        }
        buf.len()
    }
}

impl Drop for QueueRx {
    fn drop(&mut self) {
        self.shared.lock().receiver_gone = true;
        self.shared.writable.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record_tests_event as event;

    fn config(events: usize, when_full: WhenFull) -> QueueConfig {
        QueueConfig {
            events,
            bytes: 1 << 20,
            when_full,
        }
    }

    #[tokio::test]
    async fn coalescing_keeps_the_latest_modified_per_pod_in_the_older_ones_place() {
        let (tx, mut rx) = queue(config(2, WhenFull::Coalesce));
        let a1 = Arc::new(event(1, "a", "1", ChangeKind::Modified));
        let b1 = Arc::new(event(2, "b", "2", ChangeKind::Modified));
        let a2 = Arc::new(event(3, "a", "3", ChangeKind::Modified));
        assert_eq!(tx.push(a1).await, Ok(Pushed::Queued));
        assert_eq!(tx.push(b1).await, Ok(Pushed::Queued));
        assert_eq!(tx.push(a2).await, Ok(Pushed::Coalesced));
        let first = rx.recv().await.unwrap();
        assert_eq!(
            (first.object.uid.as_str(), first.rv.as_str(), first.seq),
            ("a", "3", 1),
            "a's latest state, in a's place"
        );
        assert_eq!(rx.recv().await.unwrap().object.uid, "b");
    }

    #[tokio::test]
    async fn deletes_are_never_coalesced_and_a_full_queue_then_waits() {
        let (tx, mut rx) = queue(config(1, WhenFull::Coalesce));
        tx.push(Arc::new(event(1, "a", "1", ChangeKind::Modified)))
            .await
            .unwrap();
        let push = tx.push(Arc::new(event(2, "a", "2", ChangeKind::Deleted)));
        tokio::pin!(push);
        assert!(
            futures::poll!(push.as_mut()).is_pending(),
            "a delete waits for room"
        );
        assert_eq!(rx.recv().await.unwrap().rv, "1");
        assert_eq!(push.await, Ok(Pushed::Queued));
        assert_eq!(rx.recv().await.unwrap().kind, ChangeKind::Deleted);
    }

    #[tokio::test]
    async fn drop_drops_the_new_event_when_full_and_block_waits() {
        let (tx, _rx) = queue(config(1, WhenFull::Drop));
        tx.push(Arc::new(event(1, "a", "1", ChangeKind::Added)))
            .await
            .unwrap();
        assert_eq!(
            tx.push(Arc::new(event(2, "b", "2", ChangeKind::Added)))
                .await,
            Ok(Pushed::Dropped)
        );
        let (tx, _rx) = queue(config(1, WhenFull::Block));
        tx.push(Arc::new(event(1, "a", "1", ChangeKind::Added)))
            .await
            .unwrap();
        let push = tx.push(Arc::new(event(2, "b", "2", ChangeKind::Added)));
        tokio::pin!(push);
        assert!(futures::poll!(push.as_mut()).is_pending());
    }

    #[tokio::test]
    async fn the_byte_limit_holds_but_one_event_always_fits() {
        let (tx, mut rx) = queue(QueueConfig {
            events: 100,
            bytes: 10,
            when_full: WhenFull::Drop,
        });
        assert_eq!(
            tx.push(Arc::new(event(1, "a", "1", ChangeKind::Added)))
                .await,
            Ok(Pushed::Queued)
        );
        assert_eq!(
            tx.push(Arc::new(event(2, "b", "2", ChangeKind::Added)))
                .await,
            Ok(Pushed::Dropped)
        );
        rx.recv().await.unwrap();
        drop(tx);
        assert!(rx.recv().await.is_none(), "closed and empty");
    }
}
