//! Aggregates kept per value — `COUNT(DISTINCT x)`, and `MIN`/`MAX` of `x`
//! when `x` has no integer order (strings, binaries): the dataflow keys its
//! states by group and value of `x` (the plan's last key), so each value of
//! a group is one entry whose states count and fold that value's rows. A
//! group's row merges its entries: every other aggregate combines their
//! states (all are accumulable); `COUNT(DISTINCT x)` counts the entries whose
//! own count is positive (a NULL `x`, or rows its `FILTER` refused, count
//! zero), and `MIN`/`MAX` pick the least or greatest such entry — entries
//! of one group differ only in `x`, so their row-format key bytes order them
//! as `x` orders. The merged state of `MIN`/`MAX` holds that entry's key id,
//! which rendering decodes to the value.
//!
//! Update and Complete modes render open groups, which needs all of a
//! group's entries, not only the ones that changed: [`DistinctGroups`] keeps
//! the open entries by window and group, and gives each group an id that
//! stays its own while its window is open (what `Shown` remembers rows by).

use std::collections::BTreeMap;

use arrow::row::{RowConverter, SortField};
use rustc_hash::FxHashMap;
use thund_dataflows::{AggState, Update, Value};

use super::keys::KeyBytes;
use super::IncrementalView;
use crate::error::{Error, Result};
use crate::plan::{CompiledAgg, PerValue};
use crate::window::Window;

/// One open group: its stable id, and its entries (dataflow key id → states).
struct Group {
    id: u64,
    entries: BTreeMap<u64, Vec<AggState>>,
}

/// The open entries of every group, by window then group key bytes.
#[derive(Default)]
pub(super) struct DistinctGroups {
    by_window: BTreeMap<Window, FxHashMap<Box<[u8]>, Group>>,
    next_id: u64,
    /// Entries held, over all groups.
    entries: usize,
}

impl DistinctGroups {
    /// Records an entry's new states; returns its group's id.
    fn upsert(&mut self, window: Window, group: &[u8], key: u64, aggs: &[AggState]) -> u64 {
        let groups = self.by_window.entry(window).or_default();
        let g = match groups.get_mut(group) {
            Some(g) => g,
            None => {
                self.next_id += 1;
                groups.entry(group.into()).or_insert(Group {
                    id: self.next_id,
                    entries: BTreeMap::new(),
                })
            }
        };
        if g.entries.insert(key, aggs.to_vec()).is_none() {
            self.entries += 1;
        }
        g.id
    }

    /// A window closed: its groups go.
    pub(super) fn close(&mut self, window: &Window) {
        if let Some(groups) = self.by_window.remove(window) {
            self.entries -= groups.values().map(|g| g.entries.len()).sum::<usize>();
        }
    }

    /// The entries held (part of the view's state size).
    pub(super) fn len(&self) -> usize {
        self.entries
    }

    fn group(&self, window: &Window, group: &[u8]) -> Option<&Group> {
        self.by_window.get(window).and_then(|m| m.get(group))
    }
}

/// One merged row of a group: the representative entry's key (its group
/// keys are the group's), the merged states, and the group's id if it is open.
type Merged = (Update, u64);

impl IncrementalView {
    /// The group key bytes of each update's entry (the dataflow key without
    /// its last column, the DISTINCT argument), in a row format of their own.
    fn group_bytes(&self, updates: &[&Update]) -> Result<Vec<Vec<u8>>> {
        let n = self.plan.group_keys;
        let Some(conv) = &self.converter else {
            return Ok(vec![Vec::new(); updates.len()]);
        };
        if n == 0 || updates.is_empty() {
            return Ok(vec![Vec::new(); updates.len()]);
        }
        let parser = conv.parser();
        let cols =
            conv.convert_rows(updates.iter().map(|u| parser.parse(self.keys.bytes(u.key))))?;
        let group_conv = RowConverter::new(
            self.plan.key_fields[..n]
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let rows = group_conv.convert_columns(&cols[..n])?;
        Ok((0..rows.num_rows())
            .map(|i| rows.row(i).data().to_vec())
            .collect())
    }

    /// Closed entries merged into one update per group (windows stay in order).
    pub(super) fn merge_closed(&self, closed: &[&Update]) -> Result<Vec<Update>> {
        let bytes = self.group_bytes(closed)?;
        let mut groups: BTreeMap<(Window, &[u8]), Vec<&Update>> = BTreeMap::new();
        for (u, b) in closed.iter().zip(&bytes) {
            groups.entry((u.window, b.as_slice())).or_default().push(u);
        }
        groups
            .into_values()
            .map(|entries| {
                let aggs = merge(
                    &self.view,
                    &self.plan.aggs,
                    entries.iter().map(|u| (u.key, &u.aggs[..])),
                    &self.keys,
                )?;
                Ok(Update {
                    window: entries[0].window,
                    key: entries[0].key,
                    aggs,
                })
            })
            .collect()
    }

    /// Update and Complete modes: records the changed entries, and returns
    /// each changed group merged from all its open entries, with its id.
    pub(super) fn merge_changed(&mut self, changed: &[&Update]) -> Result<Vec<Merged>> {
        let bytes = self.group_bytes(changed)?;
        let mut touched: Vec<(Window, &[u8])> = Vec::new();
        let store = self.distinct.get_or_insert_with(DistinctGroups::default);
        for (u, b) in changed.iter().zip(&bytes) {
            store.upsert(u.window, b, u.key, &u.aggs);
            touched.push((u.window, b.as_slice()));
        }
        touched.sort_unstable();
        touched.dedup();
        let store = &*store;
        let mut out = Vec::with_capacity(touched.len());
        for (window, b) in touched {
            if let Some(g) = store.group(&window, b) {
                let row = merged(&self.view, &self.plan.aggs, window, g, &self.keys)?;
                out.extend(row.map(|u| (u, g.id)));
            }
        }
        Ok(out)
    }

    /// Complete mode: every open group, merged.
    pub(super) fn merge_open(&self) -> Result<Vec<Update>> {
        let Some(store) = &self.distinct else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for (window, groups) in &store.by_window {
            // a stable order: by group id (the order groups first appeared)
            let mut gs: Vec<&Group> = groups.values().collect();
            gs.sort_unstable_by_key(|g| g.id);
            for g in gs {
                out.extend(merged(&self.view, &self.plan.aggs, *window, g, &self.keys)?);
            }
        }
        Ok(out)
    }

    /// A restore: the open entries of windows still open, as the store.
    pub(super) fn restore_distinct(
        &mut self,
        open: &BTreeMap<(Window, u64), Vec<AggState>>,
    ) -> Result<()> {
        self.distinct = Some(DistinctGroups::default());
        let entries: Vec<Update> = super::updates_of(open);
        let refs: Vec<&Update> = entries.iter().collect();
        self.merge_changed(&refs)?;
        Ok(())
    }
}

/// An open group's row: its first entry's key, its entries merged (`None`
/// for a group without entries, which the store never holds).
fn merged(
    view: &str,
    aggs: &[CompiledAgg],
    window: Window,
    g: &Group,
    keys: &impl KeyBytes,
) -> Result<Option<Update>> {
    let Some(&key) = g.entries.keys().next() else {
        return Ok(None);
    };
    let entries = g.entries.iter().map(|(k, a)| (*k, a.as_slice()));
    let aggs = merge(view, aggs, entries, keys)?;
    Ok(Some(Update { window, key, aggs }))
}

/// One group's states from its entries' (key id, states): `COUNT(DISTINCT
/// …)` counts the entries whose count is positive, `MIN`/`MAX` keep the key
/// id of the least or greatest such entry (count 1, or empty without one),
/// every other aggregate combines them.
fn merge<'a>(
    view: &str,
    aggs: &[CompiledAgg],
    entries: impl Iterator<Item = (u64, &'a [AggState])>,
    keys: &impl KeyBytes,
) -> Result<Vec<AggState>> {
    let mut out = vec![AggState::EMPTY; aggs.len()];
    let mut best: Vec<Option<u64>> = vec![None; aggs.len()];
    for (key, e) in entries {
        for (((o, b), a), x) in out.iter_mut().zip(&mut best).zip(aggs).zip(e) {
            match a.per_value {
                None => o.combine(a.kind, x).map_err(|e| Error::dataflow(view, e))?,
                Some(_) if x.count <= 0 => {}
                Some(PerValue::CountDistinct) => o.count += 1,
                Some(p) => {
                    let better = |old: &u64| {
                        let ord = keys.bytes(key).cmp(keys.bytes(*old));
                        if p == PerValue::Min {
                            ord.is_lt()
                        } else {
                            ord.is_gt()
                        }
                    };
                    if b.as_ref().is_none_or(better) {
                        *b = Some(key);
                    }
                }
            }
        }
    }
    for ((o, b), a) in out.iter_mut().zip(best).zip(aggs) {
        match (a.per_value, b) {
            (Some(PerValue::CountDistinct), _) if o.count > 0 => {
                o.value = Value::Int(i128::from(o.count));
            }
            (Some(PerValue::Min | PerValue::Max), Some(key)) => {
                *o = AggState {
                    count: 1,
                    value: Value::Int(i128::from(key)),
                };
            }
            _ => {}
        }
    }
    Ok(out)
}
