//! `MIN`/`MAX` kept per value (strings, binaries) with nothing else kept per
//! value: a group's result reads only its least and greatest value, so of
//! one batch's rows of a unit (pane, or window) and group only two values
//! need an entry of their own. Every other row of the unit and group is
//! keyed by its least value instead: its other aggregates (`COUNT(*)`,
//! `SUM(x)`) still fold into the group through that entry, its own value
//! adds nothing the group's `MIN`/`MAX` can read, and the dataflow holds two
//! entries per unit, group and batch rather than one per distinct value.

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::compute::take;
use arrow::row::{RowConverter, SortField};
use rustc_hash::FxHashMap;
use thund_dataflows::Panes;

use crate::error::Result;
use crate::time::EventTime;
use crate::window::{TimeWindows, Window};

/// `keys` (the group keys, then the value kept per value, last) of a batch
/// with event times `times`, whose rows `pass` WHERE: the value column
/// with each row's value replaced by the least or the greatest value of
/// the rows of its unit and group that pass (the greatest if it equals
/// that, else the least; unchanged where no such row has a value).
pub(super) fn extremes_only(
    keys: &[ArrayRef],
    times: &[i64],
    pass: &[bool],
    panes: Option<Panes>,
    windows: &TimeWindows,
) -> Result<Option<ArrayRef>> {
    let Some((value, groups)) = keys.split_last() else {
        return Ok(None);
    };
    let n = value.len();
    if n < 3 || n > u32::MAX as usize {
        return Ok(None);
    }
    let encoder = |cols: &[ArrayRef]| -> Result<_> {
        let fields = cols
            .iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect();
        Ok(RowConverter::new(fields)?.convert_columns(cols)?)
    };
    // a global aggregate has no group keys: one group per unit
    let group_rows = match groups.is_empty() {
        true => None,
        false => Some(encoder(groups)?),
    };
    let group = |i: usize| group_rows.as_ref().map_or(&[][..], |r| r.row(i).data());
    let value_rows = encoder(std::slice::from_ref(value))?;
    // each row's unit, by runs of times that share it
    let mut run: Option<(EventTime, EventTime, Window)> = None;
    let mut unit_of = |t: EventTime| -> Window {
        match run {
            Some((lo, hi, u)) if lo <= t && t < hi => u,
            _ => {
                let (u, lo, hi) = match panes {
                    Some(p) => {
                        let pane = p.pane_of(t);
                        (pane, pane.start, pane.end)
                    }
                    None => windows.last_window_run(t),
                };
                run = Some((lo, hi, u));
                u
            }
        }
    };
    let units: Vec<Window> = times.iter().map(|&t| unit_of(t)).collect();
    // the rows holding each unit and group's least and greatest value
    let mut extremes: FxHashMap<(Window, &[u8]), (u32, u32)> = FxHashMap::default();
    for i in (0..n).filter(|&i| pass[i] && value.is_valid(i)) {
        let v = value_rows.row(i);
        extremes
            .entry((units[i], group(i)))
            .and_modify(|(lo, hi)| {
                if v < value_rows.row(*lo as usize) {
                    *lo = i as u32;
                }
                if v > value_rows.row(*hi as usize) {
                    *hi = i as u32;
                }
            })
            .or_insert((i as u32, i as u32));
    }
    if extremes.len() * 2 >= n {
        // hardly any row would share an entry: not worth a copy of the column
        return Ok(None);
    }
    let idx: UInt32Array = (0..n)
        .map(|i| match extremes.get(&(units[i], group(i))) {
            None => i as u32,
            Some(&(lo, hi)) => {
                let greatest =
                    value.is_valid(i) && value_rows.row(i) == value_rows.row(hi as usize);
                if greatest {
                    hi
                } else {
                    lo
                }
            }
        })
        .collect();
    // a row keyed by a longer value copies its bytes: not where the copies
    // would outgrow the column (a long least value, many short rows) or
    // pass a 32-bit offset's limit (row-format lengths bound the values')
    let bytes = |i: u32| value_rows.row(i as usize).data().len();
    let before: usize = (0..n as u32).map(bytes).sum();
    let after: usize = idx.values().iter().map(|&i| bytes(i)).sum();
    if after > before.saturating_mul(2) || after > i32::MAX as usize {
        return Ok(None);
    }
    Ok(Some(take(value.as_ref(), &idx, None)?))
}
