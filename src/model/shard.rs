//! Which shard an object belongs to: the 64-bit FNV-1a hash of its uid, split into equal
//! ranges, as the apiserver's sharded list and watch (`shardSelector`) computes it. An
//! object's uid never changes, so an object stays in one shard for its whole life and every
//! change of it is seen by the same shard.
//!
//! When the shard count changes, a shard of the new count continues where the shards of the
//! old count whose ranges overlap its own had committed: it resumes each watch from the
//! earliest of their positions, and [`Floors`] leave out what each of them had already
//! passed on for its own objects.

use std::collections::BTreeMap;
use std::fmt;

/// One of `count` equal ranges of the uid hash space, `[start, end)` over 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

/// 64-bit FNV-1a of `bytes`: the apiserver's shard hash (`hash/fnv`'s `New64a`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

impl Shard {
    /// Shard `index` of `count`; `None` unless `index < count`.
    pub fn new(index: u32, count: u32) -> Option<Shard> {
        (index < count).then_some(Shard { index, count })
    }

    /// The range's bounds, `end` exclusive, as numbers up to 2^64.
    fn bounds(&self) -> (u128, u128) {
        let space = 1u128 << 64;
        let at = |i: u32| space * u128::from(i) / u128::from(self.count.max(1));
        (at(self.index), at(self.index + 1))
    }

    /// The shard of `count` that the object with `uid` is in.
    pub fn of(uid: &str, count: u32) -> Shard {
        Shard::of_hash(u128::from(fnv1a64(uid.as_bytes())), count)
    }

    /// The shard of `count` whose range holds the hash `h` (below 2^64).
    fn of_hash(h: u128, count: u32) -> Shard {
        let count = count.max(1);
        // h < 2^64, so the quotient is below `count`; the ranges' bounds are rounded down, so
        // a hash on a bound belongs to the next range.
        let guess = u32::try_from((h * u128::from(count)) >> 64).unwrap_or(count - 1);
        let next = Shard {
            index: guess + 1,
            count,
        };
        if guess + 1 < count && h >= next.bounds().0 {
            next
        } else {
            Shard {
                index: guess,
                count,
            }
        }
    }

    /// Whether this shard's range and `other`'s (of any count) share a uid hash.
    pub fn overlaps(&self, other: &Shard) -> bool {
        let (a, b) = (self.bounds(), other.bounds());
        a.0 < b.1 && b.0 < a.1
    }

    /// Whether the object with `uid` is in this shard.
    pub fn contains(&self, uid: &str) -> bool {
        let (start, end) = self.bounds();
        let h = u128::from(fnv1a64(uid.as_bytes()));
        start <= h && h < end
    }

    /// The `shardSelector` of a list or watch for this shard's objects. The apiserver wants
    /// 16 hex digits, or `0x10000000000000000` for the end of the space.
    pub fn selector(&self) -> String {
        let hex = |v: u128| {
            if v >> 64 != 0 {
                "0x10000000000000000".to_string()
            } else {
                format!("0x{v:016x}")
            }
        };
        let (start, end) = self.bounds();
        format!(
            "shardRange(object.metadata.uid, '{}', '{}')",
            hex(start),
            hex(end)
        )
    }
}

/// What the shards of an earlier count had passed on, per watch scope: for each of those
/// shards (by index), the resourceVersion its committed checkpoint had reached. A shard of a
/// new count that resumes a watch from the earliest of them leaves out the changes each had
/// already passed on for its own objects. resourceVersions are compared as integers here,
/// the documented fallback for this one hand-over (etcd's are); where one is not an integer
/// the scope is listed instead, so this is never asked of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Floors {
    /// The earlier count.
    pub count: u32,
    /// Per scope label, per earlier shard, its position (`None`: not one of the shards whose
    /// range overlaps this one's).
    pub per_scope: BTreeMap<String, Vec<Option<u64>>>,
}

impl Floors {
    /// Whether a change at `rv` of the object `uid`, seen in scope `label`, is new: not
    /// already passed on by the earlier shard that held the object.
    pub fn passes(&self, label: &str, uid: &str, rv: &str) -> bool {
        let Some(floors) = self.per_scope.get(label) else {
            return true;
        };
        let j = Shard::of(uid, self.count).index as usize;
        match (floors.get(j).copied().flatten(), rv.parse::<u64>()) {
            (Some(floor), Ok(rv)) => rv > floor,
            _ => true,
        }
    }
}

/// Where a shard (`shard`; `None`: everything, one count) continues from the committed
/// positions of the shards of an earlier count (`earlier[j]`: shard j's, per scope label):
/// per scope, the earliest position of the earlier shards whose ranges overlap its own, and
/// the [`Floors`] that leave out what each had passed on. A scope is left out (listed again)
/// unless each of those shards has an integer position for it.
pub fn continue_from(
    earlier: &[BTreeMap<String, String>],
    shard: Option<Shard>,
) -> (BTreeMap<String, String>, Floors) {
    let count = u32::try_from(earlier.len()).unwrap_or(u32::MAX);
    let me = shard.unwrap_or(Shard { index: 0, count: 1 });
    let overlapping: Vec<usize> = (0..count)
        .filter(|j| me.overlaps(&Shard { index: *j, count }))
        .map(|j| j as usize)
        .collect();
    let mut positions = BTreeMap::new();
    let mut floors = Floors {
        count,
        per_scope: BTreeMap::new(),
    };
    let labels: std::collections::BTreeSet<&String> = overlapping
        .iter()
        .flat_map(|j| earlier[*j].keys())
        .collect();
    for label in labels {
        let each: Option<Vec<(usize, u64)>> = overlapping
            .iter()
            .map(|j| Some((*j, earlier[*j].get(label)?.parse::<u64>().ok()?)))
            .collect();
        let Some(each) = each else { continue };
        let Some(earliest) = each.iter().map(|(_, rv)| *rv).min() else {
            continue;
        };
        positions.insert(label.clone(), earliest.to_string());
        let mut per = vec![None; earlier.len()];
        for (j, rv) in each {
            per[j] = Some(rv);
        }
        floors.per_scope.insert(label.clone(), per);
    }
    (positions, floors)
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_hash_is_fnv_1a_64() {
        // The published FNV-1a test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn selectors_split_the_space_as_the_apiserver_documents() {
        let s = |i, n| Shard::new(i, n).unwrap().selector();
        assert_eq!(
            s(0, 2),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            s(1, 2),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            s(2, 4),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0xc000000000000000')"
        );
        assert_eq!(
            s(0, 1),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
        );
    }

    #[test]
    fn a_shard_index_must_be_below_the_count() {
        assert!(Shard::new(3, 3).is_none());
        assert!(Shard::new(0, 0).is_none());
    }

    #[test]
    fn a_new_count_continues_from_the_earliest_overlapping_position_and_skips_what_each_passed_on()
    {
        let at = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // Four earlier shards; shard 1 of 2 overlaps earlier shards 2 and 3.
        let earlier = vec![
            at(&[("*", "100")]),
            at(&[("*", "110")]),
            at(&[("*", "120"), ("cm", "7")]),
            at(&[("*", "90"), ("cm", "x")]),
        ];
        let (positions, floors) = continue_from(&earlier, Shard::new(1, 2));
        assert_eq!(
            positions,
            at(&[("*", "90")]),
            "cm: one position is not an integer"
        );
        assert_eq!(floors.per_scope["*"], vec![None, None, Some(120), Some(90)]);
        // A uid of earlier shard 2 at 120 was passed on there; at 121 it is new.
        let uid = (0..1000)
            .map(|i| format!("uid-{i}"))
            .find(|u| Shard::of(u, 4).index == 2)
            .expect("some uid hashes into shard 2 of 4");
        assert!(!floors.passes("*", &uid, "120") && floors.passes("*", &uid, "121"));
        assert!(
            floors.passes("other", &uid, "1"),
            "a scope without floors passes all"
        );
        // Everything (one count) overlaps every earlier shard.
        let (positions, _) = continue_from(&earlier, None);
        assert_eq!(positions, at(&[("*", "90")]));
    }

    proptest! {
        #[test]
        fn the_shard_of_a_uid_is_the_one_that_contains_it(uid in "[a-f0-9-]{1,40}", count in 1u32..64) {
            let s = Shard::of(&uid, count);
            prop_assert!(s.index < count && s.contains(&uid));
        }

        #[test]
        fn a_hash_on_a_rounded_bound_belongs_to_the_range_it_starts(i in 1u32..7, count in 7u32..64) {
            let start = Shard { index: i, count }.bounds().0;
            prop_assert_eq!(Shard::of_hash(start, count).index, i);
            prop_assert_eq!(Shard::of_hash(start - 1, count).index, i - 1);
        }

        #[test]
        fn ranges_overlap_exactly_when_some_uid_hash_is_in_both(a in 0u32..6, b in 0u32..4) {
            let (x, y) = (Shard { index: a, count: 6 }, Shard { index: b, count: 4 });
            let (xa, xb) = x.bounds();
            let (ya, yb) = y.bounds();
            prop_assert_eq!(x.overlaps(&y), xa.max(ya) < xb.min(yb));
        }

        #[test]
        fn every_uid_is_in_exactly_one_shard(uid in "[a-f0-9-]{1,40}", count in 1u32..64) {
            let owners = (0..count)
                .filter(|i| Shard::new(*i, count).unwrap().contains(&uid))
                .count();
            prop_assert_eq!(owners, 1);
        }
    }
}
