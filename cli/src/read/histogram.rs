//! Durations summarized in bounded memory: count, total, min, max exactly, percentiles from a
//! log-linear histogram (8 buckets per power of two: a percentile is within 1/16 of the true
//! value, reported as its bucket's midpoint).

/// Sub-buckets per power of two (a power of two).
const SUB: u64 = 8;
/// Buckets: 64 powers of two × [`SUB`].
const BUCKETS: usize = 64 * SUB as usize;

/// A distribution of durations in ns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durations {
    /// How many.
    pub count: u64,
    /// Their sum, ns.
    pub total: u64,
    /// The shortest, ns.
    pub min: u64,
    /// The longest, ns.
    pub max: u64,
    /// Counts by bucket, allocated at the first duration.
    buckets: Vec<u32>,
}

fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let exp = 63 - u64::from(ns.leading_zeros());
    let sub = (ns >> (exp - SUB.trailing_zeros() as u64)) & (SUB - 1);
    ((exp - SUB.trailing_zeros() as u64 + 1) * SUB + sub) as usize
}

/// The smallest and largest value of a bucket.
fn bounds(b: usize) -> (u64, u64) {
    let b = b as u64;
    if b < SUB {
        return (b, b);
    }
    let shift = b / SUB - 1;
    let low = (SUB + b % SUB) << shift;
    (low, low.saturating_add((1 << shift) - 1))
}

impl Durations {
    /// Adds one duration.
    pub fn add(&mut self, ns: u64) {
        if self.buckets.is_empty() {
            self.buckets = vec![0; BUCKETS];
            self.min = ns;
        }
        self.count += 1;
        self.total = self.total.saturating_add(ns);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        let b = &mut self.buckets[bucket(ns).min(BUCKETS - 1)];
        *b = b.saturating_add(1);
    }

    /// Adds every duration of `other`.
    pub fn merge(&mut self, other: &Durations) {
        if other.count == 0 {
            return;
        }
        if self.buckets.is_empty() {
            *self = other.clone();
            return;
        }
        self.count += other.count;
        self.total = self.total.saturating_add(other.total);
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a = a.saturating_add(*b);
        }
    }

    /// The `q` quantile (0..=1), ns: the midpoint of its bucket, within [min, max]; 0 when
    /// empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += u64::from(n);
            if seen >= rank {
                let (low, high) = bounds(b);
                return (low + (high - low) / 2).clamp(self.min, self.max);
            }
        }
        self.max
    }

    /// The median, ns.
    pub fn p50(&self) -> u64 {
        self.quantile(0.5)
    }

    /// The 99th percentile, ns.
    pub fn p99(&self) -> u64 {
        self.quantile(0.99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 40, u64::MAX]) {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            let (low, high) = bounds(b);
            assert!(
                low <= ns && ns <= high,
                "{ns} in bucket {b} ({low}..{high})"
            );
            last = b;
        }
    }

    #[test]
    fn percentiles_are_within_a_sixteenth() {
        let mut d = Durations::default();
        for ns in 1..=1000u64 {
            d.add(ns * 1000);
        }
        assert_eq!((d.count, d.min, d.max), (1000, 1000, 1_000_000));
        let p50 = d.p50() as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 1.0 / 16.0, "{p50}");
        let p99 = d.p99() as f64;
        assert!((p99 - 990_000.0).abs() / 990_000.0 < 1.0 / 16.0, "{p99}");
        let mut one = Durations::default();
        one.add(7);
        assert_eq!((one.p50(), one.p99()), (7, 7));
        one.merge(&d);
        assert_eq!(one.count, 1001);
    }
}
