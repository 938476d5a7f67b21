//! Aggregates: their kinds, input values, partial states, and the per-`(window, key)` update.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::window::{Key, Window};

/// The accumulator kinds.
///
/// `AVG` is `SumInt`/`SumFloat` plus the state's `count`, done by the caller;
/// `COUNT(*)` is `Count` over a never-null input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AggKind {
    /// Number of non-null inputs. The state's `value` mirrors `count` as `Int` once it is positive.
    Count,
    /// Sum of `Value::Int` inputs (integers, and decimals already scaled), checked in `i128`.
    SumInt,
    /// Sum of `Value::Float` inputs. Rounding depends on the order of additions, which is
    /// unspecified: results are exact (and order-independent) when every partial sum is
    /// exactly representable, as with integers or dyadic fractions of moderate size.
    SumFloat,
    /// Minimum of `Value::Int` inputs.
    MinInt,
    /// Maximum of `Value::Int` inputs.
    MaxInt,
    /// Minimum of `Value::Float` inputs, in the IEEE 754 total order ([`f64::total_cmp`]:
    /// `-NaN < -inf < … < -0.0 < +0.0 < … < +inf < NaN`).
    MinFloat,
    /// Maximum of `Value::Float` inputs, in the IEEE 754 total order ([`f64::total_cmp`]).
    MaxFloat,
}

impl AggKind {
    /// Every kind, once.
    pub const ALL: [AggKind; 7] = [
        AggKind::Count,
        AggKind::SumInt,
        AggKind::SumFloat,
        AggKind::MinInt,
        AggKind::MaxInt,
        AggKind::MinFloat,
        AggKind::MaxFloat,
    ];

    /// True for the kinds whose non-null values are `Value::Float`.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            AggKind::SumFloat | AggKind::MinFloat | AggKind::MaxFloat
        )
    }

    /// True if `value` is a valid input or state value for this kind
    /// (`Null` always is; `Count` accepts any value).
    pub fn accepts(self, value: &Value) -> bool {
        match (self, value) {
            (_, Value::Null) | (AggKind::Count, _) => true,
            (k, Value::Float(_)) => k.is_float(),
            (k, Value::Int(_)) => !k.is_float(),
        }
    }
}

/// A scalar aggregate input or accumulated value.
///
/// Used as data (inside keys and differences), so it is `Eq`, `Ord` and `Hash`:
/// floats compare by [`f64::total_cmp`] and are equal and hashed by [`f64::to_bits`]
/// (so `-0.0 != +0.0`, and a NaN equals itself). Variants order as
/// `Null < Int(_) < Float(_)`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub enum Value {
    /// SQL NULL: ignored by every aggregate.
    #[default]
    Null,
    /// An integer, or a decimal scaled to an integer by the caller.
    Int(i128),
    /// A double.
    Float(f64),
}

impl Value {
    /// True for `Value::Null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Int(_) => 1,
            Value::Float(_) => 2,
        }
    }
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Value::Int(a), Value::Int(b)) => a.cmp(b),
            (Value::Float(a), Value::Float(b)) => a.total_cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl Hash for Value {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.rank().hash(state);
        match self {
            Value::Null => {}
            Value::Int(i) => i.hash(state),
            Value::Float(x) => x.to_bits().hash(state),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => write!(f, "NULL"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x}"),
        }
    }
}

/// One aggregate's partial state.
///
/// `count` is the number of non-null inputs folded in; `value` is `Null` until a non-null
/// input, then `Int` (integer kinds and `Count`, where it equals `count`) or `Float`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct AggState {
    /// Number of non-null inputs folded in.
    pub count: i64,
    /// The accumulated value; `Null` while `count == 0`.
    pub value: Value,
}

impl AggState {
    /// The state of an empty group (or of a group of NULLs): `count = 0`, `value = Null`.
    pub const EMPTY: AggState = AggState {
        count: 0,
        value: Value::Null,
    };

    /// The state of a single input `value` for an aggregate of kind `kind`.
    ///
    /// A `Null` input gives [`AggState::EMPTY`]. The value's type is not checked here;
    /// [`AggState::combine`] and [`crate::WindowedAggregate::insert`] reject a value of the
    /// wrong type for the kind (see [`AggKind::accepts`]).
    ///
    /// ```
    /// use thund_dataflows::{AggKind, AggState, Value};
    /// let s = AggState::from_value(AggKind::Count, Value::Float(2.5));
    /// assert_eq!(s, AggState { count: 1, value: Value::Int(1) });
    /// assert_eq!(AggState::from_value(AggKind::SumInt, Value::Null), AggState::EMPTY);
    /// ```
    pub fn from_value(kind: AggKind, value: Value) -> Self {
        match (kind, value) {
            (_, Value::Null) => AggState::EMPTY,
            (AggKind::Count, _) => AggState {
                count: 1,
                value: Value::Int(1),
            },
            (_, v) => AggState { count: 1, value: v },
        }
    }

    /// Checks that this state is one that [`AggState::from_value`] and
    /// [`AggState::combine`] can produce for `kind`.
    pub fn validate(&self, kind: AggKind) -> Result<()> {
        let ok = self.count >= 0
            && (self.count == 0) == self.value.is_null()
            && kind.accepts(&self.value)
            && (kind != AggKind::Count
                || self.value.is_null()
                || self.value == Value::Int(i128::from(self.count)));
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidState { kind, state: *self })
        }
    }

    /// The state folding `self` and `other` for an aggregate of kind `kind`, or an error
    /// (leaving `self` unchanged): [`Error::Overflow`] when the `i128` sum or the `i64`
    /// count overflows, [`Error::TypeMismatch`] when a value does not suit `kind`.
    pub fn combined(&self, kind: AggKind, other: &AggState) -> Result<AggState> {
        let overflow = || Error::Overflow {
            kind,
            window: None,
            detail: String::new(),
            aggregate: None,
        };
        let count = self.count.checked_add(other.count).ok_or_else(overflow)?;
        let value = match (kind, self.value, other.value) {
            (AggKind::Count, _, _) => {
                if count > 0 {
                    Value::Int(i128::from(count))
                } else {
                    Value::Null
                }
            }
            (_, a, Value::Null) if kind.accepts(&a) => a,
            (_, Value::Null, b) if kind.accepts(&b) => b,
            (_, a, b) => merge(kind, a, b)?,
        };
        Ok(AggState { count, value })
    }

    /// Folds `other` into `self` for an aggregate of kind `kind`.
    ///
    /// Integer sums are checked: an `i128` overflow is [`Error::Overflow`], never a wrap or
    /// a panic. On error `self` is unchanged.
    ///
    /// ```
    /// use thund_dataflows::{AggKind, AggState, Error, Value};
    /// let mut s = AggState::from_value(AggKind::SumInt, Value::Int(i128::MAX));
    /// let one = AggState::from_value(AggKind::SumInt, Value::Int(1));
    /// assert!(matches!(s.combine(AggKind::SumInt, &one), Err(Error::Overflow { .. })));
    /// let mut m = AggState::from_value(AggKind::MinInt, Value::Int(3));
    /// m.combine(AggKind::MinInt, &AggState::from_value(AggKind::MinInt, Value::Int(-2)))?;
    /// assert_eq!(m, AggState { count: 2, value: Value::Int(-2) });
    /// # Ok::<(), Error>(())
    /// ```
    pub fn combine(&mut self, kind: AggKind, other: &AggState) -> Result<()> {
        *self = self.combined(kind, other)?;
        Ok(())
    }

    /// Folds one non-null input: the same as
    /// `self.combine(kind, &AggState::from_value(kind, value))`, without its general
    /// dispatch (this is the per-row step of a column-wise fold). A `Null` input changes
    /// nothing. On error `self` is unchanged.
    ///
    /// ```
    /// use thund_dataflows::{AggKind, AggState, Value};
    /// let mut s = AggState::EMPTY;
    /// for x in [3, -2, 7] {
    ///     s.fold(AggKind::MinInt, Value::Int(x))?;
    /// }
    /// assert_eq!(s, AggState { count: 3, value: Value::Int(-2) });
    /// # Ok::<(), thund_dataflows::Error>(())
    /// ```
    #[inline]
    pub fn fold(&mut self, kind: AggKind, value: Value) -> Result<()> {
        let overflow = || Error::Overflow {
            kind,
            window: None,
            detail: String::new(),
            aggregate: None,
        };
        if value.is_null() {
            return Ok(());
        }
        let count = self.count.checked_add(1).ok_or_else(overflow)?;
        let folded = match (kind, self.value) {
            (AggKind::Count, _) => Value::Int(i128::from(count)),
            (_, Value::Null) if kind.accepts(&value) => value,
            (_, a) => merge(kind, a, value)?,
        };
        *self = AggState {
            count,
            value: folded,
        };
        Ok(())
    }
}

/// The value of two non-null values folded by an aggregate of kind `kind` (not `Count`):
/// [`Error::Overflow`] when an `i128` sum overflows, [`Error::TypeMismatch`] when a value
/// does not suit `kind` (naming the first that does not).
#[inline]
fn merge(kind: AggKind, a: Value, b: Value) -> Result<Value> {
    let overflow = || Error::Overflow {
        kind,
        window: None,
        detail: String::new(),
        aggregate: None,
    };
    Ok(match (kind, a, b) {
        (AggKind::SumInt, Value::Int(a), Value::Int(b)) => {
            Value::Int(a.checked_add(b).ok_or_else(overflow)?)
        }
        (AggKind::MinInt, Value::Int(a), Value::Int(b)) => Value::Int(a.min(b)),
        (AggKind::MaxInt, Value::Int(a), Value::Int(b)) => Value::Int(a.max(b)),
        (AggKind::SumFloat, Value::Float(a), Value::Float(b)) => Value::Float(a + b),
        (AggKind::MinFloat, Value::Float(a), Value::Float(b)) => {
            Value::Float(if b.total_cmp(&a).is_lt() { b } else { a })
        }
        (AggKind::MaxFloat, Value::Float(a), Value::Float(b)) => {
            Value::Float(if b.total_cmp(&a).is_gt() { b } else { a })
        }
        (_, a, b) => {
            let value = if kind.accepts(&a) { b } else { a };
            return Err(Error::TypeMismatch { kind, value });
        }
    })
}

/// One `(window, key)` with a state per aggregate, in the order of [`crate::Config::aggs`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Update {
    /// The window.
    pub window: Window,
    /// The encoded group key.
    pub key: Key,
    /// One state per aggregate of the configuration.
    pub aggs: Vec<AggState>,
}

/// Folds `other` into `acc` slot by slot (`kinds[i]` for slot `i`); on error `acc` may be
/// partly folded and the error names the slot.
pub(crate) fn combine_all(
    kinds: &[AggKind],
    acc: &mut [AggState],
    other: &[AggState],
) -> Result<()> {
    for (i, ((kind, a), b)) in kinds.iter().zip(acc.iter_mut()).zip(other).enumerate() {
        a.combine(*kind, b).map_err(|e| match e {
            Error::Overflow { kind, window, .. } => Error::Overflow {
                kind,
                window,
                detail: format!("aggregate #{i}"),
                aggregate: u32::try_from(i).ok(),
            },
            other => other,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(kind: AggKind, v: Value) -> AggState {
        AggState::from_value(kind, v)
    }

    #[test]
    fn nulls_are_ignored() {
        for kind in [
            AggKind::Count,
            AggKind::SumInt,
            AggKind::MinInt,
            AggKind::MaxInt,
        ] {
            let mut s = st(kind, Value::Int(5));
            s.combine(kind, &st(kind, Value::Null)).expect("combine");
            assert_eq!(s.count, 1, "{kind:?}");
            let mut n = AggState::EMPTY;
            n.combine(kind, &st(kind, Value::Int(5))).expect("combine");
            assert_eq!(n, s, "{kind:?}");
        }
    }

    #[test]
    fn float_order_is_total() {
        let mut mn = st(AggKind::MinFloat, Value::Float(0.0));
        mn.combine(
            AggKind::MinFloat,
            &st(AggKind::MinFloat, Value::Float(-0.0)),
        )
        .expect("combine");
        assert_eq!(mn.value, Value::Float(-0.0));
        let mut mx = st(AggKind::MaxFloat, Value::Float(f64::INFINITY));
        mx.combine(
            AggKind::MaxFloat,
            &st(AggKind::MaxFloat, Value::Float(f64::NAN)),
        )
        .expect("combine");
        assert!(matches!(mx.value, Value::Float(x) if x.is_nan()));
        assert!(Value::Null < Value::Int(i128::MIN));
        assert!(Value::Int(i128::MAX) < Value::Float(f64::NEG_INFINITY));
        assert_eq!(Value::Float(f64::NAN), Value::Float(f64::NAN));
        assert_ne!(Value::Float(0.0), Value::Float(-0.0));
    }

    #[test]
    fn overflow_and_mismatch_are_errors_and_leave_state() {
        let mut s = st(AggKind::SumInt, Value::Int(i128::MIN));
        let before = s;
        let e = s.combine(AggKind::SumInt, &st(AggKind::SumInt, Value::Int(-1)));
        assert!(matches!(e, Err(Error::Overflow { .. })));
        assert_eq!(s, before);
        let e = s.combine(AggKind::SumInt, &st(AggKind::SumFloat, Value::Float(1.0)));
        assert!(matches!(e, Err(Error::TypeMismatch { .. })));
        assert_eq!(s, before);
        let mut c = AggState {
            count: i64::MAX,
            value: Value::Int(i128::from(i64::MAX)),
        };
        assert!(c
            .combine(AggKind::Count, &st(AggKind::Count, Value::Int(0)))
            .is_err());
    }

    #[test]
    fn fold_is_combine_of_from_value() {
        let kinds = AggKind::ALL;
        let values = [
            Value::Null,
            Value::Int(0),
            Value::Int(-3),
            Value::Int(i128::MAX),
            Value::Int(i128::MIN),
            Value::Float(-0.0),
            Value::Float(2.5),
            Value::Float(f64::NAN),
            Value::Float(f64::NEG_INFINITY),
        ];
        for k in kinds {
            // every state of this kind reachable in up to two inputs, and a count at its limit
            let mut states = vec![AggState::EMPTY];
            if k == AggKind::Count {
                states.push(AggState {
                    count: i64::MAX,
                    value: Value::Int(i128::from(i64::MAX)),
                });
            }
            for a in values {
                for b in values {
                    let mut s = AggState::from_value(k, a);
                    if s.validate(k).is_ok() && s.combine(k, &AggState::from_value(k, b)).is_ok() {
                        states.push(s);
                    }
                }
            }
            for s in &states {
                for v in values {
                    let mut by_fold = *s;
                    let mut by_combine = *s;
                    let f = by_fold.fold(k, v);
                    let c = by_combine.combine(k, &AggState::from_value(k, v));
                    assert_eq!(format!("{f:?}"), format!("{c:?}"), "{k:?} {s:?} {v:?}");
                    assert_eq!(by_fold, by_combine, "{k:?} {s:?} {v:?}");
                }
            }
        }
    }

    #[test]
    fn validate_accepts_what_combine_makes() {
        let mut s = AggState::EMPTY;
        for k in [AggKind::Count, AggKind::SumFloat, AggKind::MaxInt] {
            assert!(s.validate(k).is_ok());
        }
        s.combine(AggKind::Count, &st(AggKind::Count, Value::Int(9)))
            .expect("combine");
        s.combine(AggKind::Count, &st(AggKind::Count, Value::Float(9.0)))
            .expect("combine");
        assert_eq!(
            s,
            AggState {
                count: 2,
                value: Value::Int(2)
            }
        );
        assert!(s.validate(AggKind::Count).is_ok());
        assert!(AggState {
            count: 1,
            value: Value::Null
        }
        .validate(AggKind::SumInt)
        .is_err());
        assert!(st(AggKind::SumInt, Value::Float(1.0))
            .validate(AggKind::SumInt)
            .is_err());
    }
}
