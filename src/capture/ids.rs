//! Maps and sets keyed by thread, process and CPU ids, hashed with one multiply (Fibonacci
//! hashing): ids are handed out by the kernel, not chosen by an attacker, and SipHash cost more
//! than the rest of a context switch's conversion (and ~9 % of the capture thread's time per
//! switch in `delivery`'s tables: `benches/capture.rs`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher of [`IdMap`] and [`IdSet`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, id: u32) {
        self.0 = (self.0 ^ u64::from(id)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = (self.0 ^ id).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by ids.
pub(crate) type IdMap<V> = HashMap<u32, V, BuildHasherDefault<IdHasher>>;

/// A set of ids.
pub(crate) type IdSet = HashSet<u32, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_spread_over_the_buckets() {
        let mut map: IdMap<u32> = IdMap::default();
        for tid in 1..=10_000u32 {
            map.insert(tid, tid * 2);
        }
        assert_eq!(map.len(), 10_000);
        assert!((1..=10_000u32).all(|tid| map.get(&tid) == Some(&(tid * 2))));
        // Consecutive ids land in different low bits (what the table indexes by).
        let low = |id: u32| {
            let mut h = IdHasher::default();
            h.write_u32(id);
            h.finish() >> 57
        };
        let distinct: IdSet = (1..=64u32).map(|id| low(id) as u32).collect();
        assert!(distinct.len() > 32, "{}", distinct.len());
    }
}
