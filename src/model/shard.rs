//! Which shard an object belongs to: the 64-bit FNV-1a hash of its uid, split into equal
//! ranges, as the apiserver's sharded list and watch (`shardSelector`) computes it. An
//! object's uid never changes, so an object stays in one shard for its whole life and every
//! change of it is seen by the same shard.

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

    proptest! {
        #[test]
        fn every_uid_is_in_exactly_one_shard(uid in "[a-f0-9-]{1,40}", count in 1u32..64) {
            let owners = (0..count)
                .filter(|i| Shard::new(*i, count).unwrap().contains(&uid))
                .count();
            prop_assert_eq!(owners, 1);
        }
    }
}
