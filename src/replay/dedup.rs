//! Recognising an event seen before by its CloudEvents `source` and `id`, in bounded memory.
//! Entry point: [`Seen`].
//!
//! Each (source, id) is kept as a 128-bit hash (two independently keyed SipHashes: two
//! different events collide with a chance of about n²/2¹²⁹, nil for any topic), in two
//! generations of at most `window / 2` entries each: when the newer one is full, the older
//! one is dropped. Every repeat within `window / 2` events of its last appearance is
//! recognised, whatever the topic's size; memory stays about 24 bytes per entry of the
//! window. kubecast's own repeats (a restart re-sending what was not acknowledged, a
//! re-list re-adding unchanged pods) come within a queue's length of the original.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher, RandomState};

/// The (source, id) pairs seen lately.
#[derive(Debug)]
pub struct Seen {
    keys: (RandomState, RandomState),
    newer: HashSet<u128>,
    older: HashSet<u128>,
    half: usize,
}

impl Seen {
    /// Remembers at least the last `window / 2` and at most the last `window` events.
    pub fn new(window: usize) -> Seen {
        Seen {
            keys: (RandomState::new(), RandomState::new()),
            newer: HashSet::new(),
            older: HashSet::new(),
            half: (window / 2).max(1),
        }
    }

    /// Records (source, id); `true` when it was seen within the window before.
    pub fn repeat(&mut self, source: &str, id: &str) -> bool {
        let key = self.key(source, id);
        let in_older = self.older.contains(&key);
        // A repeat is kept again as new: what counts is its last appearance.
        let fresh = self.newer.insert(key);
        if self.newer.len() >= self.half {
            self.older = std::mem::take(&mut self.newer);
        }
        in_older || !fresh
    }

    fn key(&self, source: &str, id: &str) -> u128 {
        let half = |state: &RandomState| {
            let mut h = state.build_hasher();
            // Lengths first, so that ("ab", "c") and ("a", "bc") differ.
            h.write_usize(source.len());
            h.write(source.as_bytes());
            h.write_usize(id.len());
            h.write(id.as_bytes());
            h.finish()
        };
        (u128::from(half(&self.keys.0)) << 64) | u128::from(half(&self.keys.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_same_id_from_another_source_is_another_event() {
        let mut s = Seen::new(100);
        assert!(!s.repeat("k8s://a/api/v1/namespaces/ns/pods", "u:1:added"));
        assert!(!s.repeat("k8s://b/api/v1/namespaces/ns/pods", "u:1:added"));
        assert!(s.repeat("k8s://a/api/v1/namespaces/ns/pods", "u:1:added"));
        assert!(!s.repeat("ab", "c"));
        assert!(!s.repeat("a", "bc"));
    }

    proptest! {
        /// Every repeat within half the window is recognised, and nothing new is taken for a
        /// repeat, however many events went by.
        #[test]
        fn repeats_within_half_the_window_are_recognised_and_new_ids_never_are(
            ids in proptest::collection::vec(0u32..400, 1..2000),
            window in 2usize..200,
        ) {
            let mut s = Seen::new(window);
            let mut last_seen: std::collections::HashMap<u32, usize> = Default::default();
            for (i, id) in ids.iter().enumerate() {
                let repeat = s.repeat("src", &id.to_string());
                match last_seen.get(id) {
                    None => prop_assert!(!repeat, "id {} taken for a repeat at {}", id, i),
                    Some(&at) if i - at <= window / 2 => {
                        prop_assert!(repeat, "id {} seen at {} not recognised at {}", id, at, i)
                    }
                    Some(_) => {}
                }
                last_seen.insert(*id, i);
            }
        }
    }
}
