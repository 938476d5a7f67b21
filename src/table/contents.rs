//! One view's maintained contents: the rows its emissions leave standing,
//! per window, kept in persistent maps so that publishing them after a
//! trigger is a pointer copy and a reader never sees half of one.
//!
//! The rule replays what the view emitted, in its output mode:
//!
//! * **Append**: a closing window's rows are its final rows.
//! * **Update**: a provisional row replaces the row of its window with the
//!   same key (the query's unique output columns, from DataFusion's
//!   functional dependencies: the `GROUP BY` columns, or every column under
//!   `DISTINCT`, or none for a global aggregate); a view without a key keeps
//!   every row it emitted. A window's final rows (`final = true`) replace all
//!   of its rows. Update mode emits no retractions, so a row an open window
//!   no longer has (a group a `HAVING` or a `LIMIT` dropped) stays until the
//!   window closes.
//! * **Complete**: each trigger's output is the whole view.
//!
//! Closed windows (`end ≤ W`) are then kept per the view's [`Retention`];
//! open windows always are.

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, SortField};

use crate::error::{Error, Result};
use crate::spec::{OutputMode, Retention};
use crate::state::{operator, StateFile};
use crate::time::{to_millis, EventTime};

/// Encoded bytes of a row or a key ([`arrow::row`]).
pub(crate) type Bytes = Arc<[u8]>;

/// A window as the contents order it: by end, then start (retention drops
/// the earliest ends first). A view without a window has one, `(MAX, MIN)`.
pub(crate) type WindowKey = (EventTime, EventTime);

const ALL_TIME: WindowKey = (EventTime::MAX, EventTime::MIN);

/// A persistent hash map hashed with Fx, as the host's other maps of
/// encoded keys are (SipHash was a visible part of a trigger's table upkeep).
type Map<K, V> =
    imbl::GenericHashMap<K, V, rustc_hash::FxBuildHasher, imbl::shared_ptr::DefaultSharedPtr>;

/// The persistent part: cheap to clone, what a snapshot holds.
#[derive(Clone, Default)]
pub(crate) struct Rows {
    /// Each window's rows by key.
    windows: imbl::OrdMap<WindowKey, Map<Bytes, Bytes>>,
    /// Each key's windows in order (views with a key): a key is in few
    /// windows at once, so a small slice replaced whole on change, not a
    /// persistent set (whose first node, allocated per key, made up most of
    /// a trigger's table upkeep).
    by_key: Map<Bytes, Arc<[WindowKey]>>,
    /// Rows held.
    len: usize,
}

impl Rows {
    fn insert(&mut self, w: WindowKey, key: Bytes, row: Bytes, keyed: bool) {
        // an upsert in a window the key is in already leaves the index as it
        // is: reading first spares copying nodes a snapshot shares
        if keyed {
            let ws: Option<Arc<[WindowKey]>> = match self.by_key.get(&key) {
                None => Some(Arc::from([w])),
                Some(ws) => ws.binary_search(&w).err().map(|at| {
                    let mut v = ws.to_vec();
                    v.insert(at, w);
                    v.into()
                }),
            };
            if let Some(ws) = ws {
                self.by_key.insert(key.clone(), ws);
            }
        }
        if self
            .windows
            .entry(w)
            .or_default()
            .insert(key, row)
            .is_none()
        {
            self.len += 1;
        }
    }

    /// Every row held, windows in order of their end.
    fn iter(&self) -> impl Iterator<Item = (&WindowKey, &Bytes)> {
        self.windows
            .iter()
            .flat_map(|(w, rows)| rows.values().map(move |r| (w, r)))
    }

    /// `key`'s row in window `w`.
    fn get(&self, w: &WindowKey, key: &Bytes) -> Option<&Bytes> {
        self.windows.get(w).and_then(|rows| rows.get(key))
    }

    fn remove_window(&mut self, w: WindowKey) {
        let Some(rows) = self.windows.remove(&w) else {
            return;
        };
        self.len -= rows.len();
        for k in rows.keys() {
            let Some(ws) = self.by_key.get(k) else {
                continue;
            };
            let rest: Vec<WindowKey> = ws.iter().copied().filter(|x| *x != w).collect();
            if rest.len() == ws.len() {
                continue;
            }
            match rest.is_empty() {
                true => self.by_key.remove(k),
                false => self.by_key.insert(k.clone(), rest.into()),
            };
        }
    }

    /// Number of rows held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Number of windows held.
    pub fn windows(&self) -> usize {
        self.windows.len()
    }
}

/// How rows are encoded and what identifies them: fixed when the view is
/// created, shared by the live contents and every snapshot of them.
pub(crate) struct Layout {
    /// The view's name (for errors).
    pub view: String,
    /// What the view emits, as it emits it (the query's layout).
    pub schema: SchemaRef,
    /// All of `schema`'s columns, as stored rows.
    rows: RowConverter,
    /// The key columns (of the runtime's layout) and their converter; `None`
    /// when the view's rows have no key.
    key: Option<(Vec<usize>, RowConverter, SchemaRef)>,
    /// The same key columns in the view's layout.
    key_shown: Vec<usize>,
}

impl Layout {
    /// `schema` as emitted; `key` the key columns' indices in the runtime's
    /// layout (`runtime`: bounds first, then the query's columns) or `None`;
    /// `shown[i]` the runtime column the view's column `i` is.
    pub fn new(
        view: &str,
        schema: SchemaRef,
        runtime: &SchemaRef,
        key: Option<Vec<usize>>,
        shown: &[usize],
    ) -> Result<Self> {
        // a key column the view does not show cannot be looked up by: no key
        let key_shown: Option<Vec<usize>> = key.as_ref().and_then(|cols| {
            cols.iter()
                .map(|c| shown.iter().position(|s| s == c))
                .collect()
        });
        let key = key.filter(|_| key_shown.is_some());
        let key_shown = key_shown.unwrap_or_default();
        let sort = |s: &arrow::datatypes::Schema, cols: &[usize]| -> Vec<SortField> {
            cols.iter()
                .map(|&i| SortField::new(s.field(i).data_type().clone()))
                .collect()
        };
        let all: Vec<usize> = (0..schema.fields().len()).collect();
        let rows = RowConverter::new(sort(&schema, &all))?;
        let key = match key {
            None => None,
            Some(cols) => {
                let conv = RowConverter::new(sort(runtime, &cols))?;
                let fields: Vec<_> = cols.iter().map(|&i| runtime.field(i).clone()).collect();
                let key_schema = Arc::new(arrow::datatypes::Schema::new(fields));
                Some((cols, conv, key_schema))
            }
        };
        Ok(Layout {
            view: view.to_string(),
            schema,
            rows,
            key,
            key_shown,
        })
    }

    /// The key's columns (names and types), if the view's rows have one.
    pub fn key_schema(&self) -> Option<&SchemaRef> {
        self.key.as_ref().map(|k| &k.2)
    }

    /// `rows` decoded into one batch in the view's layout.
    pub fn decode<'a>(&self, rows: impl IntoIterator<Item = &'a Bytes>) -> Result<RecordBatch> {
        let parser = self.rows.parser();
        let cols = self
            .rows
            .convert_rows(rows.into_iter().map(|b| parser.parse(b)))?;
        if cols.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }

    /// The key bytes of one row given as one array per key column (cast to
    /// the key's types), or an error naming the column that does not fit.
    pub fn encode_key(&self, values: &[ArrayRef]) -> Result<Bytes> {
        let Some((_, conv, schema)) = &self.key else {
            return Err(Error::Lookup {
                view: self.view.clone(),
                message: "its rows have no key (a view is keyed by its GROUP BY columns, or all \
                          its columns under DISTINCT): query it with SQL instead"
                    .into(),
            });
        };
        if values.len() != schema.fields().len() {
            let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
            return Err(Error::Lookup {
                view: self.view.clone(),
                message: format!(
                    "the key is ({}): {} value(s) expected, got {}",
                    names.join(", "),
                    names.len(),
                    values.len()
                ),
            });
        }
        let mut cols = Vec::with_capacity(values.len());
        for (v, f) in values.iter().zip(schema.fields()) {
            let bad = |why: String| Error::Lookup {
                view: self.view.clone(),
                message: format!(
                    "key column `{}` is {}: a {} value {why}",
                    f.name(),
                    f.data_type(),
                    v.data_type()
                ),
            };
            let exact = arrow::compute::CastOptions {
                safe: false,
                ..Default::default()
            };
            let cast = arrow::compute::cast_with_options(v, f.data_type(), &exact)
                .map_err(|e| bad(format!("does not convert ({e})")))?;
            // a cast that changes the value (7.5 to 7) is no lookup of it
            let back = arrow::compute::cast(&cast, v.data_type()).ok();
            if back.as_deref() != Some(v.as_ref()) {
                return Err(bad("does not convert exactly".into()));
            }
            cols.push(cast);
        }
        if cols.is_empty() {
            // a global aggregate: one row per window, the empty key
            return Ok(Arc::from(&[][..]));
        }
        let rows = conv.convert_columns(&cols)?;
        Ok(rows.row(0).as_ref().into())
    }
}

/// Row `i`'s key: the empty key when there are no key columns (whose rows
/// hold no row at all).
fn key_at(keys: &arrow::row::Rows, i: usize) -> Bytes {
    match keys.num_rows() {
        0 => Arc::from(&[][..]),
        _ => keys.row(i).as_ref().into(),
    }
}

/// A view's live contents: the layout, the rows, and the replay rule.
pub(crate) struct Contents {
    pub layout: Arc<Layout>,
    mode: OutputMode,
    retention: Retention,
    /// Whether the runtime's rows start with the window bounds.
    windowed: bool,
    /// The `final` column of the runtime's rows (Update mode).
    final_col: Option<usize>,
    /// Keys of rows of views without a key: a counter.
    seq: u64,
    pub rows: Rows,
    /// Whether the engine keeps tables at all ([`crate::EngineBuilder::tables`]).
    pub enabled: bool,
}

impl Contents {
    pub fn new(
        layout: Arc<Layout>,
        mode: OutputMode,
        retention: Retention,
        windowed: bool,
        runtime: &SchemaRef,
    ) -> Self {
        let final_col = (mode == OutputMode::Update).then(|| runtime.fields().len() - 1);
        Contents {
            layout,
            mode,
            retention,
            windowed,
            final_col,
            seq: 0,
            rows: Rows::default(),
            enabled: true,
        }
    }

    /// Apply one trigger's emission: `runtime` as the runtime emitted it
    /// (bounds first), `shown` the same rows in the view's layout; then drop
    /// closed windows past the retention at watermark `w`.
    pub fn apply(
        &mut self,
        runtime: &[RecordBatch],
        shown: &[RecordBatch],
        w: Option<EventTime>,
    ) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        if self.mode == OutputMode::Complete {
            self.rows = Rows::default();
        }
        let keyed = self.layout.key.is_some();
        // windows whose final rows this trigger brings: cleared once, first
        let mut finals: BTreeSet<WindowKey> = BTreeSet::new();
        for (rb, sb) in runtime.iter().zip(shown) {
            if rb.num_rows() == 0 {
                continue;
            }
            let (starts, ends) = match self.windowed {
                true => (
                    Some(to_millis(rb.column(0).as_ref())?),
                    Some(to_millis(rb.column(1).as_ref())?),
                ),
                false => (None, None),
            };
            let fin: Option<BooleanArray> = self.final_col.map(|c| {
                rb.column(c)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .cloned()
                    .unwrap_or_else(|| BooleanArray::from(vec![false; rb.num_rows()]))
            });
            let keys = match &self.layout.key {
                Some((cols, conv, _)) => {
                    let arrays: Vec<ArrayRef> =
                        cols.iter().map(|&c| rb.column(c).clone()).collect();
                    Some(conv.convert_columns(&arrays)?)
                }
                None => None,
            };
            let rows = self.layout.rows.convert_columns(sb.columns())?;
            for i in 0..rb.num_rows() {
                let wk = match (&starts, &ends) {
                    (Some(s), Some(e)) => (e.value(i), s.value(i)),
                    _ => ALL_TIME,
                };
                // Append's rows are all final; Complete's replace everything anyway
                let is_final = match (&fin, self.mode) {
                    (Some(f), _) => f.value(i),
                    (None, OutputMode::Append) => true,
                    (None, _) => false,
                };
                if is_final && finals.insert(wk) {
                    self.rows.remove_window(wk);
                }
                let key: Bytes = match &keys {
                    Some(k) => key_at(k, i),
                    None => {
                        self.seq += 1;
                        self.seq.to_be_bytes().as_slice().into()
                    }
                };
                self.rows
                    .insert(wk, key, rows.row(i).as_ref().into(), keyed);
            }
        }
        self.retain(w);
        Ok(())
    }

    /// The contents as a checkpoint file (none when empty): the rows in the
    /// view's columns after `_thund_window_start` and `_thund_window_end`
    /// (Int64 ms), written whole each epoch and never carried to the next.
    pub fn export(&self) -> Result<Option<StateFile>> {
        if !self.enabled || self.rows.len() == 0 {
            return Ok(None);
        }
        let (mut starts, mut ends, mut rows) = (Vec::new(), Vec::new(), Vec::new());
        for (w, r) in self.rows.iter() {
            starts.push(w.1);
            ends.push(w.0);
            rows.push(r);
        }
        let b = self.layout.decode(rows)?;
        let mut fields = vec![
            arrow::datatypes::Field::new(
                "_thund_window_start",
                arrow::datatypes::DataType::Int64,
                false,
            ),
            arrow::datatypes::Field::new(
                "_thund_window_end",
                arrow::datatypes::DataType::Int64,
                false,
            ),
        ];
        fields.extend(b.schema().fields().iter().map(|f| f.as_ref().clone()));
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(arrow::array::Int64Array::from(starts)),
            Arc::new(arrow::array::Int64Array::from(ends)),
        ];
        cols.extend(b.columns().iter().cloned());
        let batch = RecordBatch::try_new(Arc::new(arrow::datatypes::Schema::new(fields)), cols)?;
        Ok(Some(StateFile::new(
            operator::TABLE,
            0,
            vec![batch],
            EventTime::MIN,
        )))
    }

    /// Restore what [`Self::export`] wrote.
    pub fn import<'a>(&mut self, batches: impl IntoIterator<Item = &'a RecordBatch>) -> Result<()> {
        self.rows = Rows::default();
        let keyed = self.layout.key.is_some();
        let bad = |m: &str| Error::CheckpointFormat {
            view: self.layout.view.clone(),
            message: format!("table contents: {m}"),
        };
        for b in batches {
            let n = self.layout.schema.fields().len();
            if b.num_columns() != n + 2 {
                return Err(bad("the columns do not match the view's"));
            }
            let starts = to_millis(b.column(0).as_ref())?;
            let ends = to_millis(b.column(1).as_ref())?;
            let cols = b.columns()[2..].to_vec();
            let rows = self.layout.rows.convert_columns(&cols)?;
            let keys = match &self.layout.key {
                Some((_, conv, _)) => {
                    let k: Vec<ArrayRef> = self
                        .layout
                        .key_shown
                        .iter()
                        .map(|&i| cols[i].clone())
                        .collect();
                    Some(conv.convert_columns(&k)?)
                }
                None => None,
            };
            for i in 0..b.num_rows() {
                let key: Bytes = match &keys {
                    Some(k) => key_at(k, i),
                    None => {
                        self.seq += 1;
                        self.seq.to_be_bytes().as_slice().into()
                    }
                };
                let w = (ends.value(i), starts.value(i));
                self.rows.insert(w, key, rows.row(i).as_ref().into(), keyed);
            }
        }
        Ok(())
    }

    /// The contents as they stand, to publish.
    pub fn published(&self) -> Published {
        Published {
            layout: self.layout.clone(),
            rows: self.rows.clone(),
            enabled: self.enabled,
        }
    }

    /// Drop the closed windows (`end ≤ w`) the retention does not keep. At
    /// the end of the stream (W = +∞) event time is counted back from the
    /// newest window's end, so the last windows stay as they would have.
    fn retain(&mut self, w: Option<EventTime>) {
        let Some(w) = w else { return };
        let closed: Vec<WindowKey> = self
            .rows
            .windows
            .range(..=(w, EventTime::MAX))
            .map(|(k, _)| *k)
            .filter(|k| *k != ALL_TIME)
            .collect();
        let drop: Vec<WindowKey> = match self.retention {
            Retention::EventTime(d) => {
                let from = match w {
                    EventTime::MAX => closed.last().map_or(w, |k| k.0),
                    _ => w,
                };
                let d = d.as_millis().min(i64::MAX as u128) as i64;
                let keep_after = from.saturating_sub(d);
                closed.into_iter().filter(|k| k.0 <= keep_after).collect()
            }
            Retention::Windows(n) => {
                let n = n.min(closed.len());
                closed[..closed.len() - n].to_vec()
            }
        };
        for k in drop {
            self.rows.remove_window(k);
        }
    }
}

/// A published view's contents as of one trigger.
#[derive(Clone)]
pub(crate) struct Published {
    pub layout: Arc<Layout>,
    pub rows: Rows,
    pub enabled: bool,
}

impl Published {
    /// Every row held, windows in order of their end.
    pub fn batch(&self) -> Result<RecordBatch> {
        self.layout.decode(self.rows.iter().map(|(_, r)| r))
    }

    /// The rows of `key` across the windows held, in order of their end.
    pub fn lookup(&self, key: &Bytes) -> Result<RecordBatch> {
        let Some(ws) = self.rows.by_key.get(key) else {
            return Ok(RecordBatch::new_empty(self.layout.schema.clone()));
        };
        let rows = ws.iter().filter_map(|w| self.rows.get(w, key));
        self.layout.decode(rows)
    }
}
