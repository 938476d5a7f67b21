//! The difference type: per-`(window, key)` aggregate states carried in the diff, with
//! exact eviction.
//!
//! Every insert contributes `Acc { n: 1, parts }` at the current time, and the eviction
//! operator ([`crate::operators::evict`]) adds `Acc { n: -1, parts: [] }` at the window's end.
//! Addition adds `n` and folds `parts` with [`AggState::combined`]; a sum whose `n` is zero is
//! *the* zero, whatever its parts. This is a commutative monoid on positive contributions
//! (COUNT and SUM add, MIN and MAX are semilattices), so the accumulation of a `(window, key)`
//! at any time before the window's end is exactly the fold of its inputs. At the window's
//! end every contribution meets its retraction, so the accumulation there is exactly zero and
//! the entry leaves the trace once compaction passes the end: eviction is exact even for
//! MIN, MAX and float sums, which have no inverse. (Sums mixing positive and negative
//! contributions are only ever formed at or after the window's end, where nobody reads
//! their parts.)

use differential_dataflow::difference::{IsZero, Monoid, Semigroup};
use serde::{Deserialize, Serialize};

use crate::state::agg::{AggKind, AggState};

/// One slot of an [`Acc`]: an aggregate's kind and partial state.
pub(crate) type Part = (AggKind, AggState);

/// The difference type of the windowed-aggregate arrangement.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct Acc {
    /// Number of contributions: positive for inserted states, negative for evictions.
    pub(crate) n: i64,
    /// Set when folding `parts` overflowed (or met a type mismatch): the parts are then wrong
    /// and whoever reads them must report [`crate::Error::Overflow`].
    pub(crate) overflow: bool,
    /// One slot per aggregate; empty for an eviction.
    pub(crate) parts: Vec<Part>,
}

impl Acc {
    /// One contribution of the given states.
    pub(crate) fn insert(kinds: &[AggKind], states: Vec<AggState>) -> Self {
        Acc {
            n: 1,
            overflow: false,
            parts: kinds.iter().copied().zip(states).collect(),
        }
    }

    /// The eviction of this difference: it cancels `self`'s contributions.
    pub(crate) fn retraction(&self) -> Self {
        Acc {
            n: self.n.wrapping_neg(),
            overflow: false,
            parts: Vec::new(),
        }
    }
}

impl IsZero for Acc {
    fn is_zero(&self) -> bool {
        self.n == 0
    }
}

impl Semigroup for Acc {
    fn plus_equals(&mut self, rhs: &Self) {
        self.n = self.n.wrapping_add(rhs.n);
        if self.n == 0 {
            self.parts.clear();
            self.overflow = false;
            return;
        }
        self.overflow |= rhs.overflow;
        if rhs.parts.is_empty() {
            return;
        }
        if self.parts.is_empty() {
            self.parts.clone_from(&rhs.parts);
            return;
        }
        for ((kind, a), (_, b)) in self.parts.iter_mut().zip(&rhs.parts) {
            match a.combined(*kind, b) {
                Ok(s) => *a = s,
                Err(_) => self.overflow = true,
            }
        }
    }
}

impl Monoid for Acc {
    fn zero() -> Self {
        Acc {
            n: 0,
            overflow: false,
            parts: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::agg::Value;

    const KINDS: [AggKind; 3] = [AggKind::MinFloat, AggKind::SumFloat, AggKind::SumInt];

    fn acc(x: f64, i: i128) -> Acc {
        Acc::insert(
            &KINDS,
            vec![
                AggState::from_value(KINDS[0], Value::Float(x)),
                AggState::from_value(KINDS[1], Value::Float(x)),
                AggState::from_value(KINDS[2], Value::Int(i)),
            ],
        )
    }

    #[test]
    fn every_contribution_meets_its_retraction() {
        let ups = [acc(0.1, 1), acc(0.2, i128::MAX), acc(-3.7, 5)];
        // Any interleaving of the updates and their retractions sums to zero.
        let mut all: Vec<Acc> = ups.to_vec();
        all.extend(ups.iter().map(Acc::retraction));
        for rot in 0..all.len() {
            all.rotate_left(1);
            let mut sum = Acc::zero();
            for a in &all {
                sum.plus_equals(a);
            }
            assert!(sum.is_zero(), "rotation {rot}: {sum:?}");
            assert_eq!(sum, Acc::zero());
        }
    }

    #[test]
    fn positives_fold_and_flag_overflow() {
        let mut s = acc(2.0, 1);
        s.plus_equals(&acc(-1.0, 2));
        assert_eq!(s.n, 2);
        assert!(!s.overflow);
        assert_eq!(s.parts[0].1.value, Value::Float(-1.0));
        assert_eq!(s.parts[1].1.value, Value::Float(1.0));
        assert_eq!(s.parts[2].1.value, Value::Int(3));
        s.plus_equals(&acc(0.0, i128::MAX));
        assert!(s.overflow);
    }
}
