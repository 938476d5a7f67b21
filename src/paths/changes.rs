//! Update mode's rule, one for both paths: an open window emits the rows of
//! its new result less the rows of its old result, as multisets, so a group
//! whose projected row did not change emits nothing, whatever its
//! accumulators did.

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::take;
use arrow::row::{RowConverter, Rows, SortField};
use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::paths::sql::checked::canonical_array;
use crate::window::Window;

/// The indices of the `new` rows not matched by an equal `old` row, as
/// multisets, in order.
pub(crate) fn unmatched<'a>(
    old: impl IntoIterator<Item = &'a [u8]>,
    new: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<u32> {
    let mut counts: FxHashMap<&[u8], usize> = FxHashMap::default();
    for r in old {
        *counts.entry(r).or_default() += 1;
    }
    let mut keep = Vec::new();
    for (i, r) in new.into_iter().enumerate() {
        match counts.get_mut(r) {
            Some(c) if *c > 0 => *c -= 1,
            _ => keep.push(i as u32),
        }
    }
    keep
}

/// `batch`'s columns as rows compare under the contract: floats canonical,
/// so that a NaN is one value whatever its sign or payload (a sum's NaN
/// from `inf + -inf` is the processor's negative one) and `-0.0` is `0.0`.
fn comparable(batch: &RecordBatch) -> Vec<ArrayRef> {
    batch.columns().iter().map(canonical_array).collect()
}

/// A row converter over every column of `batch`.
pub(crate) fn converter(batch: &RecordBatch) -> Result<RowConverter> {
    converter_of(&batch.schema())
}

/// A row converter over every field of `schema`.
pub(crate) fn converter_of(schema: &arrow::datatypes::SchemaRef) -> Result<RowConverter> {
    let fields: Vec<SortField> = schema
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    Ok(RowConverter::new(fields)?)
}

/// The rows of `new` not in `old`, as multisets (the recompute path, which
/// has both results of the window).
pub(crate) fn changed_rows(old: Option<&RecordBatch>, new: &RecordBatch) -> Result<RecordBatch> {
    let Some(old) = old else {
        return Ok(new.clone());
    };
    if old.num_rows() == 0 || new.num_rows() == 0 {
        return Ok(new.clone());
    }
    let Ok(conv) = converter(new) else {
        return Ok(new.clone());
    };
    let old_rows = conv.convert_columns(&comparable(old))?;
    let new_rows = conv.convert_columns(&comparable(new))?;
    let keep = unmatched(
        old_rows.iter().map(|r| r.data()),
        new_rows.iter().map(|r| r.data()),
    );
    take_rows(new, &keep)
}

/// One window's old rows, and its new rows with their index in the batch.
type OldAndNew<'a> = (Vec<&'a [u8]>, Vec<(usize, &'a [u8])>);

/// The incremental path's side: the projected row each open group last
/// showed (by window, then group key id), so that a trigger's changed groups
/// emit their new rows less their old ones.
#[derive(Default)]
pub(crate) struct Shown {
    rows: FxHashMap<Window, FxHashMap<u64, Box<[u8]>>>,
    conv: Option<RowConverter>,
    /// A changed group's row always differs from every row its window
    /// showed ([`crate::plan::CompiledAggregate::rows_always_change`]):
    /// nothing is remembered and every changed row is shown.
    always_changes: bool,
    /// Rows of different groups always differ
    /// ([`crate::plan::CompiledAggregate::keys_shown`]): a changed group's
    /// row is compared with its own old row only.
    keyed: bool,
}

impl Shown {
    /// What rows whose groups' rows always change need: no memory.
    pub(crate) fn always_changing() -> Self {
        Shown {
            always_changes: true,
            ..Shown::default()
        }
    }

    /// What rows that show their group keys need: each group's last row.
    pub(crate) fn keyed() -> Self {
        Shown {
            keyed: true,
            ..Shown::default()
        }
    }

    /// `batch` holds the rows of the groups whose state changed (row `i`
    /// from group `from[i]` of `groups`; a group HAVING dropped has no row),
    /// the last column being Update mode's `final` flag. Returns the rows
    /// to emit and remembers what each group now shows.
    pub(crate) fn changed(
        &mut self,
        groups: &[(Window, u64)],
        batch: &RecordBatch,
        from: &[usize],
    ) -> Result<RecordBatch> {
        if self.always_changes || (batch.num_rows() == 0 && groups.is_empty()) {
            return Ok(batch.clone());
        }
        // rows that cannot be compared: every changed row is shown
        let Some(rows) = self.rows_of(batch)? else {
            return Ok(batch.clone());
        };
        if self.keyed {
            return self.changed_by_group(groups, batch, from, &rows);
        }
        // per window: the new rows of its changed groups less their old ones
        let mut by_window: FxHashMap<Window, OldAndNew<'_>> = FxHashMap::default();
        for (w, key) in groups {
            if let Some(old) = self.rows.get(w).and_then(|m| m.get(key)) {
                by_window.entry(*w).or_default().0.push(old);
            }
        }
        for (i, &g) in from.iter().enumerate() {
            by_window
                .entry(groups[g].0)
                .or_default()
                .1
                .push((i, rows.row(i).data()));
        }
        let mut keep = Vec::new();
        for (old, new) in by_window.values() {
            let kept = unmatched(old.iter().copied(), new.iter().map(|(_, r)| *r));
            keep.extend(kept.into_iter().map(|k| new[k as usize].0 as u32));
        }
        keep.sort_unstable();
        let out = take_rows(batch, &keep)?;
        // what each changed group shows now (nothing when HAVING dropped it)
        let mut now: Vec<Option<Box<[u8]>>> = vec![None; groups.len()];
        for (i, &g) in from.iter().enumerate() {
            now[g] = Some(rows.row(i).data().into());
        }
        for ((w, key), row) in groups.iter().zip(now) {
            let m = self.rows.entry(*w).or_default();
            match row {
                Some(r) => {
                    m.insert(*key, r);
                }
                None => {
                    m.remove(key);
                }
            }
        }
        Ok(out)
    }

    /// [`Shown::changed`] where rows of different groups always differ: the
    /// multiset rule per window comes down to each group's new row less its
    /// own old one. A row of the same length as the old one is written over
    /// it in place.
    fn changed_by_group(
        &mut self,
        groups: &[(Window, u64)],
        batch: &RecordBatch,
        from: &[usize],
        rows: &Rows,
    ) -> Result<RecordBatch> {
        let mut keep = Vec::with_capacity(from.len());
        let mut has_row = vec![false; groups.len()];
        for (i, &g) in from.iter().enumerate() {
            let (w, key) = groups[g];
            has_row[g] = true;
            let new = rows.row(i).data();
            let m = self.rows.entry(w).or_default();
            match m.get_mut(&key) {
                Some(old) if **old == *new => {}
                Some(old) if old.len() == new.len() => {
                    old.copy_from_slice(new);
                    keep.push(i as u32);
                }
                _ => {
                    m.insert(key, new.into());
                    keep.push(i as u32);
                }
            }
        }
        // a group HAVING dropped shows nothing now
        for ((w, key), _) in groups.iter().zip(has_row).filter(|(_, h)| !h) {
            if let Some(m) = self.rows.get_mut(w) {
                m.remove(key);
            }
        }
        take_rows(batch, &keep)
    }

    /// `ORDER BY … LIMIT` per window: the rows of each window in `windows`
    /// are all of `batch`'s rows of that window (`window_of[i]` is row
    /// `i`'s), whichever groups they come from. Returns the rows to emit —
    /// each window's new rows less its old ones — and remembers the new.
    pub(crate) fn replaced(
        &mut self,
        windows: &[Window],
        batch: &RecordBatch,
        window_of: &[Window],
    ) -> Result<RecordBatch> {
        if batch.num_rows() == 0 && windows.is_empty() {
            return Ok(batch.clone());
        }
        // rows that cannot be compared: every changed row is shown
        let Some(rows) = self.rows_of(batch)? else {
            return Ok(batch.clone());
        };
        let mut new: FxHashMap<Window, Vec<(usize, &[u8])>> = FxHashMap::default();
        for (i, w) in window_of.iter().enumerate() {
            new.entry(*w).or_default().push((i, rows.row(i).data()));
        }
        let mut keep = Vec::new();
        for w in windows {
            let fresh = new.get(w).map(Vec::as_slice).unwrap_or(&[]);
            let old = self.rows.get(w);
            let kept = unmatched(
                old.into_iter().flat_map(|m| m.values().map(|r| &r[..])),
                fresh.iter().map(|(_, r)| *r),
            );
            keep.extend(kept.into_iter().map(|k| fresh[k as usize].0 as u32));
        }
        keep.sort_unstable();
        let out = take_rows(batch, &keep)?;
        // what each window shows now: its rows, numbered
        for w in windows {
            let m = self.rows.entry(*w).or_default();
            m.clear();
            if let Some(fresh) = new.get(w) {
                m.extend(
                    fresh
                        .iter()
                        .enumerate()
                        .map(|(j, (_, r))| (j as u64, (*r).into())),
                );
            }
        }
        Ok(out)
    }

    /// The shown columns of `batch` (all but Update mode's `final` flag) as
    /// comparable rows; `None` if their types cannot be compared.
    fn rows_of(&mut self, batch: &RecordBatch) -> Result<Option<Rows>> {
        let shown = batch.project(&(0..batch.num_columns() - 1).collect::<Vec<_>>())?;
        if self.conv.is_none() {
            match converter(&shown) {
                Ok(c) => self.conv = Some(c),
                Err(_) => return Ok(None),
            }
        }
        match self.conv.as_ref() {
            Some(conv) => Ok(Some(conv.convert_columns(&comparable(&shown))?)),
            None => Ok(None),
        }
    }

    /// Forget every row shown (a restore shows them anew).
    pub(crate) fn reset(&mut self) {
        self.rows.clear();
        self.conv = None;
    }

    /// A window closed: its groups show nothing any more.
    pub(crate) fn close(&mut self, w: &Window) {
        self.rows.remove(w);
    }
}

/// The rows of `batch` at `idx`.
pub(crate) fn take_rows(batch: &RecordBatch, idx: &[u32]) -> Result<RecordBatch> {
    if idx.len() == batch.num_rows() && idx.iter().enumerate().all(|(i, x)| i as u32 == *x) {
        return Ok(batch.clone());
    }
    let indices = UInt32Array::from(idx.to_vec());
    let cols = batch
        .columns()
        .iter()
        .map(|c| take(c.as_ref(), &indices, None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(batch.schema(), cols)?)
}
