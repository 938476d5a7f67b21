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
use std::sync::atomic::{AtomicBool, Ordering};
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

/// One window's rows as the view emitted them, batch by batch in the view's
/// layout. Without a key every row stands; with one, each key's last row
/// does (a window's final rows having replaced all before them), and the
/// log is cut down to those rows once it holds more than twice as many.
/// Appending is a pointer copy: no row is encoded until someone looks one
/// up by key (encoding each row into a persistent map, copying the nodes a
/// snapshot shared, was about half of a trigger of a grouped Update view).
#[derive(Clone, Default)]
struct Log {
    batches: imbl::Vector<RecordBatch>,
    /// Rows in `batches`.
    logged: usize,
    /// Rows standing when `batches` were last known to hold no key twice.
    standing: usize,
    /// Whether they still do (always, without a key).
    clean: bool,
}

/// A log of a keyed view is cut down when it holds more than twice its
/// standing rows and this many more (so small windows are not cut down at
/// every trigger), or this many batches.
const SLACK: usize = 64;
const MAX_BATCHES: usize = 32;

impl Log {
    /// The rows standing, in order of their last emission.
    fn standing(&self, layout: &Layout) -> Result<Vec<RecordBatch>> {
        match self.clean {
            true => Ok(self.batches.iter().cloned().collect()),
            false => Ok(vec![layout.last_per_key(self.batches.iter())?]),
        }
    }

    /// The number of rows standing.
    fn count(&self, layout: &Layout) -> Result<usize> {
        match self.clean {
            true => Ok(self.logged),
            false => Ok(layout.last_per_key(self.batches.iter())?.num_rows()),
        }
    }
}

/// The persistent part: cheap to clone, what a snapshot holds.
#[derive(Clone, Default)]
pub(crate) struct Rows {
    /// Each window's rows as emitted (every view, until a keyed one is first
    /// looked up by key).
    logs: imbl::OrdMap<WindowKey, Log>,
    /// Whether a keyed view's rows are held by key (`windows`, `by_key`)
    /// instead: from the trigger after its first lookup on, so a view that
    /// is looked up is served from an index and one that is not pays none.
    indexed: bool,
    /// Each window's rows by key (indexed views).
    windows: imbl::OrdMap<WindowKey, Map<Bytes, Bytes>>,
    /// Each key's windows in order (indexed views): a key is in few windows
    /// at once, so a small slice replaced whole on change, not a persistent
    /// set (whose first node, allocated per key, made up most of a trigger's
    /// table upkeep).
    by_key: Map<Bytes, Arc<[WindowKey]>>,
    /// Rows held in `windows`.
    indexed_len: usize,
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
            self.indexed_len += 1;
        }
    }

    /// Log rows of window `w`; `distinct`: they hold no key twice and the
    /// window had no rows before them (a window's final rows, or Complete's).
    fn log(
        &mut self,
        w: WindowKey,
        rows: RecordBatch,
        distinct: bool,
        layout: &Layout,
    ) -> Result<()> {
        let n = rows.num_rows();
        if n == 0 {
            return Ok(());
        }
        let log = self.logs.entry(w).or_default();
        let keyed = layout.key.is_some();
        log.clean = !keyed || (distinct && (log.logged == 0 || log.clean));
        log.logged += n;
        log.batches.push_back(rows);
        if log.clean {
            log.standing = log.logged;
        }
        if keyed
            && !log.clean
            && (log.logged > 2 * log.standing + SLACK || log.batches.len() > MAX_BATCHES)
        {
            let cut = layout.last_per_key(log.batches.iter())?;
            log.logged = cut.num_rows();
            log.standing = cut.num_rows();
            log.clean = true;
            log.batches = imbl::Vector::unit(cut);
        }
        Ok(())
    }

    /// Hold a keyed view's logged rows by key from now on.
    fn index(&mut self, layout: &Layout) -> Result<()> {
        let logs = std::mem::take(&mut self.logs);
        self.indexed = true;
        for (w, log) in logs.iter() {
            for b in log.standing(layout)? {
                let rows = layout.rows.convert_columns(b.columns())?;
                let keys = layout.keys_of(&b)?;
                for i in 0..b.num_rows() {
                    self.insert(*w, key_at(&keys, i), rows.row(i).as_ref().into());
                }
            }
        }
        Ok(())
    }

    /// `key`'s row in window `w` (indexed views).
    fn get(&self, w: &WindowKey, key: &Bytes) -> Option<&Bytes> {
        self.windows.get(w).and_then(|rows| rows.get(key))
    }

    fn remove_window(&mut self, w: WindowKey) {
        self.logs.remove(&w);
        let Some(rows) = self.windows.remove(&w) else {
            return;
        };
        self.indexed_len -= rows.len();
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

    /// The rows standing, window by window in order of their end.
    fn parts(&self, layout: &Layout) -> Result<Vec<(WindowKey, Vec<RecordBatch>)>> {
        let mut out = Vec::with_capacity(self.logs.len() + self.windows.len());
        for (w, log) in self.logs.iter() {
            out.push((*w, log.standing(layout)?));
        }
        for (w, rows) in self.windows.iter() {
            out.push((*w, vec![layout.decode(rows.values())?]));
        }
        out.sort_by_key(|(w, _)| *w);
        Ok(out)
    }

    /// The windows held, in order of their end.
    fn window_keys(&self) -> Vec<WindowKey> {
        let mut ws: Vec<WindowKey> = self
            .windows
            .keys()
            .chain(self.logs.keys())
            .copied()
            .collect();
        ws.sort_unstable();
        ws.dedup();
        ws
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
    /// Whether the view's rows have been looked up by key: from then on the
    /// live contents hold them by key ([`Rows::index`]).
    looked_up: AtomicBool,
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
            looked_up: AtomicBool::new(false),
        })
    }

    /// The key of each row of `b` (in the view's layout; a view with a key).
    fn keys_of(&self, b: &RecordBatch) -> Result<arrow::row::Rows> {
        let Some((_, conv, _)) = &self.key else {
            return Err(Error::Lookup {
                view: self.view.clone(),
                message: "its rows have no key".into(),
            });
        };
        let cols: Vec<ArrayRef> = self
            .key_shown
            .iter()
            .map(|&i| b.column(i).clone())
            .collect();
        Ok(conv.convert_columns(&cols)?)
    }

    /// The rows of `batches` (in the view's layout, in emission order) that
    /// stand: each key's last, in order; all of them without a key.
    fn last_per_key<'a>(
        &self,
        batches: impl IntoIterator<Item = &'a RecordBatch>,
    ) -> Result<RecordBatch> {
        let all = arrow::compute::concat_batches(&self.schema, batches)?;
        let n = all.num_rows();
        if self.key.is_none() || n <= 1 {
            return Ok(all);
        }
        if self.key_shown.is_empty() {
            // the empty key (a global aggregate): one row per window
            return compact(&all.slice(n - 1, 1));
        }
        let keys = self.keys_of(&all)?;
        let mut seen: rustc_hash::FxHashSet<&[u8]> =
            rustc_hash::FxHashSet::with_capacity_and_hasher(n, Default::default());
        let mut keep: Vec<u32> = Vec::with_capacity(n);
        for i in (0..n).rev() {
            if seen.insert(keys.row(i).data()) {
                keep.push(i as u32);
            }
        }
        if keep.len() == n {
            return Ok(all);
        }
        keep.reverse();
        let keep = arrow::array::UInt32Array::from(keep);
        Ok(arrow::compute::take_record_batch(&all, &keep)?)
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
        let layout = self.layout.clone();
        if layout.key.is_some() && !self.rows.indexed && layout.looked_up.load(Ordering::Relaxed) {
            self.rows.index(&layout)?;
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
            let (Some((cols, conv, _)), true) = (&layout.key, self.rows.indexed) else {
                let sb = layout.laid_out(sb)?;
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
                    let distinct = f || mode == OutputMode::Complete;
                    self.rows.log(wk, part, distinct, &layout)?;
                }
                continue;
            };
            let arrays: Vec<ArrayRef> = cols.iter().map(|&c| rb.column(c).clone()).collect();
            let keys = conv.convert_columns(&arrays)?;
            let rows = layout.rows.convert_columns(sb.columns())?;
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
        if !self.enabled {
            return Ok(None);
        }
        let (mut starts, mut ends, mut parts) = (Vec::new(), Vec::new(), Vec::new());
        for (w, batches) in self.rows.parts(&self.layout)? {
            for b in batches {
                starts.extend(std::iter::repeat_n(w.1, b.num_rows()));
                ends.extend(std::iter::repeat_n(w.0, b.num_rows()));
                parts.push(b);
            }
        }
        if starts.is_empty() {
            return Ok(None);
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
            let options =
                arrow::array::RecordBatchOptions::new().with_row_count(Some(b.num_rows()));
            let rows =
                RecordBatch::try_new_with_options(self.layout.schema.clone(), cols, &options)
                    .map_err(|e| bad(&e.to_string()))?;
            // a file's rows are not trusted to hold a key once per window:
            // logged as not distinct, they are cut down to each key's last
            for (at, len, wk) in runs(b.num_rows(), wk) {
                let part = compact(&rows.slice(at, len))?;
                self.rows.log(wk, part, false, &self.layout)?;
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
        let parts = self.rows.parts(&self.layout)?;
        let all = parts.iter().flat_map(|(_, b)| b.iter());
        Ok(arrow::compute::concat_batches(&self.layout.schema, all)?)
    }

    /// How much is held: rows and windows.
    pub fn held(&self) -> Result<(usize, usize)> {
        let mut rows = self.rows.indexed_len;
        for log in self.rows.logs.values() {
            rows += log.count(&self.layout)?;
        }
        Ok((rows, self.rows.logs.len() + self.rows.windows.len()))
    }

    /// The rows of `key` across the windows held, in order of their end:
    /// from the index, or, before the view was first looked up, from each
    /// window's rows (and the live contents are indexed from the next
    /// trigger on).
    pub fn lookup(&self, key: &Bytes) -> Result<RecordBatch> {
        if !self.rows.indexed {
            self.layout.looked_up.store(true, Ordering::Relaxed);
            let mut parts = Vec::new();
            for (_, log) in self.rows.logs.iter() {
                for b in log.standing(&self.layout)? {
                    let keys = self.layout.keys_of(&b)?;
                    // no key columns: every row has the empty key
                    let hit: Vec<u32> = (0..b.num_rows() as u32)
                        .filter(|&i| match keys.num_rows() {
                            0 => key.is_empty(),
                            _ => keys.row(i as usize).data() == key.as_ref(),
                        })
                        .collect();
                    if !hit.is_empty() {
                        let hit = arrow::array::UInt32Array::from(hit);
                        parts.push(arrow::compute::take_record_batch(&b, &hit)?);
                    }
                }
            }
            return Ok(arrow::compute::concat_batches(&self.layout.schema, &parts)?);
        }
        let Some(ws) = self.rows.by_key.get(key) else {
            return Ok(RecordBatch::new_empty(self.layout.schema.clone()));
        };
        let rows = ws.iter().filter_map(|w| self.rows.get(w, key));
        self.layout.decode(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use std::collections::BTreeMap;

    /// A keyed Update view's contents after many provisional emissions that
    /// repeat keys: the logs are cut down (bounded) and still hold each
    /// key's last row, by contents, by count and by lookup, before and after
    /// the view is indexed.
    #[test]
    fn logs_are_cut_down_to_each_keys_last_row() {
        let ts = DataType::Timestamp(TimeUnit::Millisecond, None);
        let runtime = Arc::new(Schema::new(vec![
            Field::new("window_start", ts.clone(), false),
            Field::new("window_end", ts.clone(), false),
            Field::new("k", DataType::Int64, true),
            Field::new("c", DataType::Int64, false),
            Field::new("final", DataType::Boolean, false),
        ]));
        let shown_schema = Arc::new(Schema::new(runtime.fields()[..4].to_vec()));
        let layout = Layout::new(
            "v",
            shown_schema.clone(),
            &runtime,
            Some(vec![2]),
            &[0, 1, 2, 3],
        )
        .expect("layout");
        let mut c = Contents::new(
            Arc::new(layout),
            OutputMode::Update,
            Retention::Windows(8),
            true,
            &runtime,
        );
        // (end, start) → key → last value
        let mut model: BTreeMap<(i64, i64), BTreeMap<Option<i64>, i64>> = BTreeMap::new();
        let mut seed = 7u64;
        let mut next = move |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for t in 0..400i64 {
            let n = 1 + next(40) as usize;
            let (mut s, mut e, mut k, mut v) = (vec![], vec![], vec![], vec![]);
            for _ in 0..n {
                let w = next(2) as i64;
                let key = match next(30) {
                    0 => None,
                    x => Some(x as i64),
                };
                s.push(w * 10);
                e.push(w * 10 + 10);
                k.push(key);
                v.push(t);
                model
                    .entry((w * 10 + 10, w * 10))
                    .or_default()
                    .insert(key, t);
            }
            let cols: Vec<ArrayRef> = vec![
                Arc::new(TimestampMillisecondArray::from(s)),
                Arc::new(TimestampMillisecondArray::from(e)),
                Arc::new(Int64Array::from(k)),
                Arc::new(Int64Array::from(v)),
                Arc::new(BooleanArray::from(vec![false; n])),
            ];
            let rb = RecordBatch::try_new(runtime.clone(), cols.clone()).expect("rb");
            let sb = RecordBatch::try_new(shown_schema.clone(), cols[..4].to_vec()).expect("sb");
            c.apply(&[rb], &[sb], None).expect("apply");
            for log in c.rows.logs.values() {
                assert!(log.batches.len() <= MAX_BATCHES);
                assert!(log.logged <= 2 * log.standing + SLACK + 40);
            }
            let p = c.published();
            let want: usize = model.values().map(BTreeMap::len).sum();
            assert_eq!(p.held().expect("held"), (want, model.len()), "trigger {t}");
            let b = p.batch().expect("batch");
            let mut got: Vec<(i64, Option<i64>, i64)> = Vec::new();
            let ends = to_millis(b.column(1).as_ref()).expect("ms");
            let (k, v) = (b.column(2).as_any(), b.column(3).as_any());
            let k = k.downcast_ref::<Int64Array>().expect("k");
            let v = v.downcast_ref::<Int64Array>().expect("v");
            for i in 0..b.num_rows() {
                got.push((ends.value(i), k.is_valid(i).then(|| k.value(i)), v.value(i)));
            }
            got.sort();
            let mut want: Vec<(i64, Option<i64>, i64)> = model
                .iter()
                .flat_map(|(w, ks)| ks.iter().map(move |(k, v)| (w.0, *k, *v)))
                .collect();
            want.sort();
            assert_eq!(got, want, "trigger {t}");
            if t == 200 {
                // the first lookup: served from the logs, indexed after
                let key = p
                    .layout
                    .encode_key(&[Arc::new(Int64Array::from(vec![3]))])
                    .expect("key");
                let rows = p.lookup(&key).expect("lookup");
                let n = model
                    .values()
                    .filter(|ks| ks.contains_key(&Some(3)))
                    .count();
                assert_eq!(rows.num_rows(), n);
                assert!(!c.rows.indexed);
            }
            assert_eq!(c.rows.indexed, t > 200, "trigger {t}");
        }
    }
}
