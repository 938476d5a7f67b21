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
    /// Each window's rows by key (views with a key).
    windows: imbl::OrdMap<WindowKey, Map<Bytes, Bytes>>,
    /// Each window's rows as emitted, batch by batch in the view's layout
    /// (views without a key): nothing looks a row up, so no row is encoded
    /// (encoding them one by one, and freeing them, was most of a closing
    /// trigger's table upkeep for the top-rows views).
    emitted: imbl::OrdMap<WindowKey, imbl::Vector<RecordBatch>>,
    /// Each key's windows in order (views with a key): a key is in few
    /// windows at once, so a small slice replaced whole on change, not a
    /// persistent set (whose first node, allocated per key, made up most of
    /// a trigger's table upkeep).
    by_key: Map<Bytes, Arc<[WindowKey]>>,
    /// Rows held.
    len: usize,
}

impl Rows {
    fn insert(&mut self, w: WindowKey, key: Bytes, row: Bytes) {
        // an upsert in a window the key is in already leaves the index as it
        // is: reading first spares copying nodes a snapshot shares
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

    /// Rows of window `w` of a view without a key.
    fn append(&mut self, w: WindowKey, rows: RecordBatch) {
        if rows.num_rows() == 0 {
            return;
        }
        self.len += rows.num_rows();
        self.emitted.entry(w).or_default().push_back(rows);
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
        if let Some(batches) = self.emitted.remove(&w) {
            self.len -= batches.iter().map(|b| b.num_rows()).sum::<usize>();
        }
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

    /// The windows held, in order of their end.
    fn window_keys(&self) -> Vec<WindowKey> {
        let mut ws: Vec<WindowKey> = self
            .windows
            .keys()
            .chain(self.emitted.keys())
            .copied()
            .collect();
        ws.sort_unstable();
        ws.dedup();
        ws
    }

    /// Number of rows held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Number of windows held.
    pub fn windows(&self) -> usize {
        self.windows.len() + self.emitted.len()
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

    /// `rows` (in the view's layout) under the view's schema.
    fn laid_out(&self, rows: &RecordBatch) -> Result<RecordBatch> {
        if rows.schema() == self.schema {
            return Ok(rows.clone());
        }
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.num_rows()));
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            rows.columns().to_vec(),
            &options,
        )?)
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

/// Runs of rows `0..n` with the same `of(i)`: (first row, length, value).
fn runs<T: PartialEq>(n: usize, of: impl Fn(usize) -> T) -> Vec<(usize, usize, T)> {
    let mut out: Vec<(usize, usize, T)> = Vec::new();
    for i in 0..n {
        let v = of(i);
        match out.last_mut() {
            Some((_, len, last)) if *last == v => *len += 1,
            _ => out.push((i, 1, v)),
        }
    }
    out
}

/// `part` (a slice) in buffers of its own, so that holding it does not hold
/// the rest of the batch it was cut from.
fn compact(part: &RecordBatch) -> Result<RecordBatch> {
    Ok(arrow::compute::concat_batches(&part.schema(), [part])?)
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
        let mode = self.mode;
        if mode == OutputMode::Complete {
            self.rows = Rows::default();
        }
        // windows whose final rows this trigger brings: cleared once, first
        let mut finals: BTreeSet<WindowKey> = BTreeSet::new();
        for (rb, sb) in runtime.iter().zip(shown) {
            let n = rb.num_rows();
            if n == 0 {
                continue;
            }
            let bounds = match self.windowed {
                true => Some((
                    to_millis(rb.column(0).as_ref())?,
                    to_millis(rb.column(1).as_ref())?,
                )),
                false => None,
            };
            let wk = |i: usize| match &bounds {
                Some((s, e)) => (e.value(i), s.value(i)),
                None => ALL_TIME,
            };
            let fin: Option<BooleanArray> = self.final_col.map(|c| {
                rb.column(c)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .cloned()
                    .unwrap_or_else(|| BooleanArray::from(vec![false; n]))
            });
            // Append's rows are all final; Complete's replace everything anyway
            let is_final = |i: usize| match &fin {
                Some(f) => f.value(i),
                None => mode == OutputMode::Append,
            };
            let Some((cols, conv, _)) = &self.layout.key else {
                let sb = self.layout.laid_out(sb)?;
                let runs = runs(n, |i| (wk(i), is_final(i)));
                let whole = runs.len() == 1;
                for (at, len, (wk, f)) in runs {
                    if f && finals.insert(wk) {
                        self.rows.remove_window(wk);
                    }
                    let part = match whole {
                        true => sb.clone(),
                        false => compact(&sb.slice(at, len))?,
                    };
                    self.rows.append(wk, part);
                }
                continue;
            };
            let arrays: Vec<ArrayRef> = cols.iter().map(|&c| rb.column(c).clone()).collect();
            let keys = conv.convert_columns(&arrays)?;
            let rows = self.layout.rows.convert_columns(sb.columns())?;
            for i in 0..n {
                let wk = wk(i);
                if is_final(i) && finals.insert(wk) {
                    self.rows.remove_window(wk);
                }
                self.rows
                    .insert(wk, key_at(&keys, i), rows.row(i).as_ref().into());
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
        let (mut starts, mut ends, mut parts) = (Vec::new(), Vec::new(), Vec::new());
        if !self.rows.windows.is_empty() {
            let mut rows = Vec::new();
            for (w, r) in self.rows.iter() {
                starts.push(w.1);
                ends.push(w.0);
                rows.push(r);
            }
            parts.push(self.layout.decode(rows)?);
        }
        for (w, batches) in self.rows.emitted.iter() {
            for b in batches.iter() {
                starts.extend(std::iter::repeat_n(w.1, b.num_rows()));
                ends.extend(std::iter::repeat_n(w.0, b.num_rows()));
                parts.push(b.clone());
            }
        }
        let b = arrow::compute::concat_batches(&self.layout.schema, &parts)?;
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
            let wk = |i: usize| (ends.value(i), starts.value(i));
            let cols = b.columns()[2..].to_vec();
            let Some((_, conv, _)) = &self.layout.key else {
                let options =
                    arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
                let rows =
                    RecordBatch::try_new_with_options(self.layout.schema.clone(), cols, &options)
                        .map_err(|e| bad(&e.to_string()))?;
                for (at, len, wk) in runs(b.num_rows(), wk) {
                    self.rows.append(wk, compact(&rows.slice(at, len))?);
                }
                continue;
            };
            let rows = self.layout.rows.convert_columns(&cols)?;
            let k: Vec<ArrayRef> = self
                .layout
                .key_shown
                .iter()
                .map(|&i| cols[i].clone())
                .collect();
            let keys = conv.convert_columns(&k)?;
            for i in 0..b.num_rows() {
                self.rows
                    .insert(wk(i), key_at(&keys, i), rows.row(i).as_ref().into());
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
            .window_keys()
            .into_iter()
            .take_while(|k| k.0 <= w)
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
        if self.rows.windows.is_empty() {
            let parts: Vec<&RecordBatch> =
                self.rows.emitted.values().flat_map(|b| b.iter()).collect();
            return Ok(arrow::compute::concat_batches(&self.layout.schema, parts)?);
        }
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
