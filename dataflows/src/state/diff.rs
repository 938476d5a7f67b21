//! The difference type: per-`(window, key)` aggregate states carried in the diff, with
//! exact eviction.
//!
//! Every insert contributes `Acc { n: 1, parts }` at the current time. When a window (or,
//! with panes, a pane's last window) closes, the worker that holds it adds
//! `Acc { n: -N, parts: [] }` for its `N` contributions, at the current time, which is at or
//! after the unit's end ([`Acc::eviction`], from the open-window table). Addition adds `n`
//! and folds `parts` with [`AggState::combined`]; a sum whose `n` is zero is *the* zero,
//! whatever its parts. This is a commutative monoid on positive contributions (COUNT and
//! SUM add, MIN and MAX are semilattices), so the accumulation of a `(window, key)` at any
//! time before the window's end is exactly the fold of its inputs. Once compaction passes
//! the eviction's time, the contributions meet it, the accumulation is exactly zero and the
//! entry leaves the trace: eviction is exact even for MIN, MAX and float sums, which have no
//! inverse. (Sums mixing positive and negative contributions are only ever formed at or
//! after the window's end, where nobody reads their parts.)
//!
//! The eviction enters when the unit closes, not in advance at a future time: updates at
//! future times would wait in the arrangement's batcher, which re-sorts everything it holds
//! at every step, making each step cost the whole open state.

use differential_dataflow::difference::{IsZero, Monoid, Semigroup};
use serde::{Deserialize, Serialize};

use crate::state::agg::{AggKind, AggState, Value};

/// Aggregates an [`Acc`] holds inline; more spill to the heap.
pub(crate) const INLINE: usize = 4;

/// One aggregate's partial state, flat: `count` non-null inputs and the value's bits (an
/// `i128` as two words, or an `f64`'s bits in `lo`), which the slot's [`AggKind`] reads.
/// `count == 0` is the empty state; `Count`'s value is its count.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub(crate) struct Slot {
    count: i64,
    lo: u64,
    hi: i64,
}

impl Slot {
    /// The slot of `state` for `kind` (`None` if the value's type does not suit the kind).
    fn of(kind: AggKind, state: &AggState) -> Option<Slot> {
        let (lo, hi) = match (state.count, state.value) {
            (0, Value::Null) => (0, 0),
            (_, Value::Float(x)) if kind.is_float() => (x.to_bits(), 0),
            (_, Value::Int(i)) if !kind.is_float() => (i as u64, (i >> 64) as i64),
            _ => return None,
        };
        Some(Slot {
            count: state.count,
            lo,
            hi,
        })
    }

    /// The state this slot holds for `kind`.
    fn state(&self, kind: AggKind) -> AggState {
        let value = if self.count == 0 {
            Value::Null
        } else if kind.is_float() {
            Value::Float(f64::from_bits(self.lo))
        } else {
            Value::Int((i128::from(self.hi) << 64) | i128::from(self.lo))
        };
        AggState {
            count: self.count,
            value,
        }
    }
}

/// The aggregates' kinds and slots: inline up to [`INLINE`] aggregates, else on the heap.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
enum Slots {
    Inline {
        len: u8,
        kinds: [AggKind; INLINE],
        slots: [Slot; INLINE],
    },
    Spilled(Box<[(AggKind, Slot)]>),
}

impl Slots {
    const EMPTY: Slots = Slots::Inline {
        len: 0,
        kinds: [AggKind::Count; INLINE],
        slots: [Slot {
            count: 0,
            lo: 0,
            hi: 0,
        }; INLINE],
    };

    fn len(&self) -> usize {
        match self {
            Slots::Inline { len, .. } => usize::from(*len),
            Slots::Spilled(s) => s.len(),
        }
    }

    fn kind(&self, i: usize) -> AggKind {
        match self {
            Slots::Inline { kinds, .. } => kinds[i],
            Slots::Spilled(s) => s[i].0,
        }
    }

    fn slot(&self, i: usize) -> &Slot {
        match self {
            Slots::Inline { slots, .. } => &slots[i],
            Slots::Spilled(s) => &s[i].1,
        }
    }

    fn slot_mut(&mut self, i: usize) -> &mut Slot {
        match self {
            Slots::Inline { slots, .. } => &mut slots[i],
            Slots::Spilled(s) => &mut s[i].1,
        }
    }
}

/// The difference type of the windowed-aggregate arrangement: `Copy`-sized and
/// allocation-free for up to [`INLINE`] aggregates.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct Acc {
    /// Number of contributions: positive for inserted states, negative for evictions.
    pub(crate) n: i64,
    /// Set when folding the states overflowed (or met a state that does not suit its kind):
    /// the states are then wrong and whoever reads them must report [`crate::Error::Overflow`].
    pub(crate) overflow: bool,
    /// One slot per aggregate; none for an eviction.
    slots: Slots,
}

impl Acc {
    /// One contribution of the given states (one per kind).
    pub(crate) fn insert(kinds: &[AggKind], states: &[AggState]) -> Self {
        let mut overflow = kinds.len() != states.len();
        let mut slot = |(k, s): (&AggKind, &AggState)| {
            Slot::of(*k, s).unwrap_or_else(|| {
                overflow = true;
                Slot::default()
            })
        };
        let slots = if kinds.len() <= INLINE {
            let mut inline = [Slot::default(); INLINE];
            let mut ks = [AggKind::Count; INLINE];
            for (i, pair) in kinds.iter().zip(states).enumerate() {
                inline[i] = slot(pair);
                ks[i] = *pair.0;
            }
            Slots::Inline {
                len: kinds.len() as u8,
                kinds: ks,
                slots: inline,
            }
        } else {
            Slots::Spilled(
                kinds
                    .iter()
                    .zip(states)
                    .map(|pair| (*pair.0, slot(pair)))
                    .collect(),
            )
        };
        Acc {
            n: 1,
            overflow,
            slots,
        }
    }

    /// The eviction of `n` contributions: added to their sum, in any order and grouping,
    /// it gives the zero.
    pub(crate) fn eviction(n: i64) -> Self {
        Acc {
            n: n.wrapping_neg(),
            overflow: false,
            slots: Slots::EMPTY,
        }
    }

    /// Number of aggregates held (0 for an eviction or the zero).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The kind of the first aggregate, if any (to name an overflow).
    pub(crate) fn first_kind(&self) -> Option<AggKind> {
        (self.len() > 0).then(|| self.slots.kind(0))
    }

    /// Aggregate `i`'s kind and state.
    pub(crate) fn get(&self, i: usize) -> (AggKind, AggState) {
        let kind = self.slots.kind(i);
        (kind, self.slots.slot(i).state(kind))
    }

    /// Every aggregate's state, in order.
    pub(crate) fn states(&self) -> impl Iterator<Item = AggState> + '_ {
        (0..self.len()).map(|i| self.get(i).1)
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
            self.slots = Slots::EMPTY;
            self.overflow = false;
            return;
        }
        self.overflow |= rhs.overflow;
        if rhs.len() == 0 {
            return;
        }
        if self.len() == 0 {
            self.slots.clone_from(&rhs.slots);
            return;
        }
        if self.len() != rhs.len() {
            self.overflow = true;
            return;
        }
        for i in 0..self.len() {
            let kind = self.slots.kind(i);
            let a = self.slots.slot(i).state(kind);
            let b = rhs.slots.slot(i).state(kind);
            match a.combined(kind, &b).map(|s| Slot::of(kind, &s)) {
                Ok(Some(s)) => *self.slots.slot_mut(i) = s,
                _ => self.overflow = true,
            }
        }
    }
}

impl Monoid for Acc {
    fn zero() -> Self {
        Acc {
            n: 0,
            overflow: false,
            slots: Slots::EMPTY,
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
            &[
                AggState::from_value(KINDS[0], Value::Float(x)),
                AggState::from_value(KINDS[1], Value::Float(x)),
                AggState::from_value(KINDS[2], Value::Int(i)),
            ],
        )
    }

    #[test]
    fn slots_hold_every_state_exactly() {
        for (kind, v) in [
            (AggKind::SumInt, Value::Int(i128::MIN)),
            (AggKind::SumInt, Value::Int(i128::MAX)),
            (AggKind::MinInt, Value::Int(-1)),
            (AggKind::MaxFloat, Value::Float(f64::NAN)),
            (AggKind::MinFloat, Value::Float(-0.0)),
            (AggKind::SumFloat, Value::Float(f64::NEG_INFINITY)),
            (AggKind::Count, Value::Int(1)),
            (AggKind::SumInt, Value::Null),
        ] {
            let s = AggState::from_value(kind, v);
            let slot = Slot::of(kind, &s).expect("suits its kind");
            assert_eq!(slot.state(kind), s, "{kind:?} {v:?}");
        }
        assert!(Slot::of(
            AggKind::SumInt,
            &AggState::from_value(AggKind::SumFloat, Value::Float(1.0))
        )
        .is_none());
    }

    #[test]
    fn spilled_and_inline_sums_agree() {
        // six aggregates spill; their first three fold as the inline three do
        let six = [KINDS, KINDS].concat();
        let states = |x: f64, i: i128| {
            let one = [
                AggState::from_value(KINDS[0], Value::Float(x)),
                AggState::from_value(KINDS[1], Value::Float(x)),
                AggState::from_value(KINDS[2], Value::Int(i)),
            ];
            [one, one].concat()
        };
        let mut wide = Acc::insert(&six, &states(2.0, 1));
        wide.plus_equals(&Acc::insert(&six, &states(-1.5, 7)));
        let mut narrow = acc(2.0, 1);
        narrow.plus_equals(&acc(-1.5, 7));
        assert_eq!(wide.len(), 6);
        for i in 0..6 {
            assert_eq!(wide.get(i), narrow.get(i % 3), "slot {i}");
        }
        wide.plus_equals(&Acc::eviction(wide.n));
        assert!(wide.is_zero());
    }

    #[test]
    fn the_contributions_meet_their_eviction() {
        let ups = [acc(0.1, 1), acc(0.2, i128::MAX), acc(-3.7, 5)];
        // Any interleaving of the updates and one eviction of all three sums to zero.
        let mut all: Vec<Acc> = ups.to_vec();
        all.push(Acc::eviction(ups.len() as i64));
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
        assert_eq!(s.get(0).1.value, Value::Float(-1.0));
        assert_eq!(s.get(1).1.value, Value::Float(1.0));
        assert_eq!(s.get(2).1.value, Value::Int(3));
        s.plus_equals(&acc(0.0, i128::MAX));
        assert!(s.overflow);
    }
}
