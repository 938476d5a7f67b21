//! The recompute path: DataFusion evaluates the view's SQL per window over
//! that window's buffered, non-late rows.
//!
//! It is the always-correct path (any SQL DataFusion runs) and the oracle the
//! incremental path is tested against. Its cost follows the change: a trigger
//! evaluates only the windows it dirtied (Update, Complete) or closed
//! (Append), and the rows of closed windows are evicted. The SQL is planned
//! once per view; each evaluation swaps the window's rows into the view's
//! in-memory tables and executes that plan.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Int64Array, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, take};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};
use datafusion::datasource::MemTable;
use datafusion::execution::context::SQLOptions;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::error::{Error, Result};
use crate::sidecar::StateFile;
use crate::spec::{ms, OutputMode, WindowKind, WindowSpec};
use crate::time::{bound_column, EventTime};
use crate::window::{TimeWindows, Window};

/// A source as a view sees it.
#[derive(Clone, Debug)]
pub(crate) struct SourceInfo {
    pub name: String,
    pub schema: SchemaRef,
    pub event_time: usize,
}

/// The view's SQL planned once over in-memory tables whose contents are swapped per evaluation.
pub(crate) struct SqlEvaluator {
    view: String,
    ctx: SessionContext,
    plan: LogicalPlan,
    tables: Vec<Arc<MemTable>>,
    /// The query's output schema (all fields nullable).
    pub out_schema: SchemaRef,
    rt: Arc<tokio::runtime::Runtime>,
}

impl SqlEvaluator {
    /// Plan `sql` over `sources`; errors name the SQL and DataFusion's reason.
    pub fn new(
        view: &str,
        sql: &str,
        sources: &[SourceInfo],
        rt: Arc<tokio::runtime::Runtime>,
    ) -> Result<Self> {
        let config = SessionConfig::new()
            .with_target_partitions(1)
            .with_information_schema(false);
        let ctx = SessionContext::new_with_config(config);
        let mut tables = Vec::new();
        for s in sources {
            let t = Arc::new(
                MemTable::try_new(s.schema.clone(), vec![vec![]])
                    .map_err(|e| Error::exec(view, e))?,
            );
            ctx.register_table(s.name.as_str(), t.clone())
                .map_err(|e| Error::spec(view, format!("source `{}`: {e}", s.name)))?;
            tables.push(t);
        }
        let sql_err = |e: datafusion::error::DataFusionError| Error::Sql {
            view: view.to_string(),
            sql: sql.to_string(),
            message: e.to_string(),
        };
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let df = rt
            .block_on(ctx.sql_with_options(sql, options))
            .map_err(sql_err)?;
        let plan = df.logical_plan().clone();
        let out_schema = Arc::new(Schema::new(
            plan.schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        Ok(SqlEvaluator {
            view: view.to_string(),
            ctx,
            plan,
            tables,
            out_schema,
            rt,
        })
    }

    /// The session the plan was made in (to create physical expressions).
    pub fn context(&self) -> &SessionContext {
        &self.ctx
    }

    /// The DataFusion logical plan (for `explain`).
    pub fn logical_plan(&self) -> &LogicalPlan {
        &self.plan
    }

    /// Run the query with `rows[i]` as the contents of source `i`.
    pub fn eval(&self, rows: Vec<Vec<RecordBatch>>) -> Result<RecordBatch> {
        let view = &self.view;
        let batches = self.rt.block_on(async {
            for (t, r) in self.tables.iter().zip(rows) {
                *t.batches[0].write().await = r;
            }
            let df = self.ctx.execute_logical_plan(self.plan.clone()).await?;
            let out = df.collect().await;
            for t in &self.tables {
                t.batches[0].write().await.clear();
            }
            out
        });
        let batches = batches.map_err(|e| Error::exec(view, e))?;
        let mut columns: Vec<ArrayRef> = Vec::new();
        if batches.is_empty() {
            return Ok(RecordBatch::new_empty(self.out_schema.clone()));
        }
        let all = concat_batches(&batches[0].schema(), &batches)?;
        columns.extend(all.columns().iter().cloned());
        Ok(RecordBatch::try_new(self.out_schema.clone(), columns)?)
    }
}

/// Output schema of a view: window bounds, the query's columns, and `final` in Update mode.
pub(crate) fn output_schema(
    query: &Schema,
    bound: Option<&DataType>,
    mode: OutputMode,
) -> SchemaRef {
    let mut fields: Vec<Field> = Vec::new();
    if let Some(dt) = bound {
        fields.push(Field::new("window_start", dt.clone(), false));
        fields.push(Field::new("window_end", dt.clone(), false));
    }
    fields.extend(query.fields().iter().map(|f| f.as_ref().clone()));
    if mode == OutputMode::Update {
        fields.push(Field::new("final", DataType::Boolean, false));
    }
    Arc::new(Schema::new(fields))
}

/// Rows of one source that passed the late check, with their event times.
pub(crate) struct OnTime {
    pub source: usize,
    pub batch: RecordBatch,
    pub times: Int64Array,
}

/// What taking rows in dirtied.
#[derive(Default)]
pub(crate) struct Dirty {
    windows: Vec<(EventTime, EventTime)>,
    sessions: std::collections::HashSet<(Vec<u8>, EventTime)>,
}

/// What a step emitted.
#[derive(Default)]
pub(crate) struct StepOutput {
    pub batches: Vec<RecordBatch>,
    pub windows_closed: u64,
}

/// Why a row is not taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Every window of the row had closed; the latest of them.
    Late(Option<Window>),
    /// The event time is NULL.
    NullTime,
}

/// The late rule (design §1) for windows of a given kind, given the state at `W_prev`.
pub(crate) fn time_window_late(
    w: &TimeWindows,
    t: EventTime,
    w_prev: Option<EventTime>,
) -> Option<Window> {
    let last = w.last_window(t);
    match w_prev {
        Some(wp) if last.end <= wp => Some(last),
        _ => None,
    }
}

/// The late rule for tumbling and hopping windows, row by row (shared by
/// both paths): NULL event times and rows whose last window closed at `w_prev`
/// are refused.
pub(crate) fn classify_time(
    windows: &TimeWindows,
    times: &Int64Array,
    w_prev: Option<EventTime>,
) -> Vec<Option<Refusal>> {
    times
        .iter()
        .map(|t| match t {
            None => Some(Refusal::NullTime),
            Some(t) => time_window_late(windows, t, w_prev).map(|w| Refusal::Late(Some(w))),
        })
        .collect()
}

/// The recompute runtime of one view.
pub(crate) struct RecomputeView {
    eval: SqlEvaluator,
    out: SchemaRef,
    mode: OutputMode,
    bound: Option<DataType>,
    n_sources: usize,
    layout: Layout,
    /// Complete mode: every closed window's final rows, kept for re-emission.
    closed_results: ClosedResults,
    /// Rows taken in since the last checkpoint: (source, rows, W from which
    /// no open window needs them).
    unsaved: Vec<(usize, RecordBatch, EventTime)>,
    /// Whether a state root takes checkpoints (else nothing is tracked for them).
    checkpointing: bool,
}

enum Layout {
    /// No window: all rows, one result.
    All {
        rows: Vec<Vec<RecordBatch>>,
        result: Option<RecordBatch>,
        dirty: bool,
    },
    /// Tumbling or hopping windows; rows by pane.
    Time {
        windows: TimeWindows,
        panes: Panes,
        /// Windows holding rows that have not closed, ordered by end; the last result if evaluated.
        live: BTreeMap<(EventTime, EventTime), Option<RecordBatch>>,
    },
    /// Per-key sessions.
    Session(Sessions),
}

struct Session {
    start: EventTime,
    last: EventTime,
    rows: Vec<RecordBatch>,
    result: Option<RecordBatch>,
}

struct Sessions {
    gap: i64,
    key_cols: Vec<usize>,
    converter: RowConverter,
    open: HashMap<Vec<u8>, Vec<Session>>,
    /// Per key, the end of its latest closed session (kept while it can still make a row late).
    closed_end: HashMap<Vec<u8>, EventTime>,
}

impl RecomputeView {
    pub fn new(
        view: &str,
        eval: SqlEvaluator,
        sources: &[SourceInfo],
        window: Option<&WindowSpec>,
        mode: OutputMode,
        bound: Option<DataType>,
    ) -> Result<Self> {
        let out = output_schema(&eval.out_schema, bound.as_ref(), mode);
        let layout = match window.map(|w| (&w.kind, w.offset)) {
            None => Layout::All {
                rows: vec![Vec::new(); sources.len()],
                result: None,
                dirty: true,
            },
            Some((WindowKind::Tumbling { size }, off)) => Layout::Time {
                windows: TimeWindows::new(ms(*size), ms(*size), ms(off)),
                panes: BTreeMap::new(),
                live: BTreeMap::new(),
            },
            Some((WindowKind::Hopping { size, slide }, off)) => Layout::Time {
                windows: TimeWindows::new(ms(*size), ms(*slide), ms(off)),
                panes: BTreeMap::new(),
                live: BTreeMap::new(),
            },
            Some((WindowKind::Session { gap, key }, _)) => {
                let schema = &sources[0].schema;
                let mut key_cols = Vec::new();
                for k in key {
                    let i = schema.index_of(k).map_err(|_| {
                        Error::spec(
                            view,
                            format!(
                                "window.key column `{k}` is not in source `{}`",
                                sources[0].name
                            ),
                        )
                    })?;
                    key_cols.push(i);
                }
                let fields = key_cols
                    .iter()
                    .map(|i| SortField::new(schema.field(*i).data_type().clone()))
                    .collect();
                let converter = RowConverter::new(fields).map_err(|e| {
                    Error::spec(
                        view,
                        format!("window.key cannot be used as a session key: {e}"),
                    )
                })?;
                Layout::Session(Sessions {
                    gap: ms(*gap),
                    key_cols,
                    converter,
                    open: HashMap::new(),
                    closed_end: HashMap::new(),
                })
            }
        };
        Ok(RecomputeView {
            eval,
            out,
            mode,
            bound,
            n_sources: sources.len(),
            layout,
            closed_results: ClosedResults::default(),
            unsaved: Vec::new(),
            checkpointing: false,
        })
    }

    /// The view's output schema.
    pub fn schema(&self) -> SchemaRef {
        self.out.clone()
    }

    pub fn evaluator(&self) -> &SqlEvaluator {
        &self.eval
    }

    /// Per row of `batch` (source `_source`): `None` if it is taken in, or why not.
    pub fn classify(
        &self,
        batch: &RecordBatch,
        times: &Int64Array,
        w_prev: Option<EventTime>,
    ) -> Result<Vec<Option<Refusal>>> {
        let mut out = Vec::with_capacity(times.len());
        match &self.layout {
            Layout::All { .. } => {
                for t in times.iter() {
                    out.push(match (t, w_prev) {
                        (None, _) => Some(Refusal::NullTime),
                        (Some(t), Some(wp)) if t < wp => Some(Refusal::Late(None)),
                        _ => None,
                    });
                }
            }
            Layout::Time { windows, .. } => out = classify_time(windows, times, w_prev),
            Layout::Session(s) => {
                let keys = s.keys(batch)?;
                for (i, t) in times.iter().enumerate() {
                    out.push(match t {
                        None => Some(Refusal::NullTime),
                        Some(t) => {
                            let span = Window {
                                start: t,
                                end: t.saturating_add(s.gap),
                            };
                            let behind = w_prev.is_some_and(|wp| span.end <= wp);
                            let merges_closed = s
                                .closed_end
                                .get(keys.row(i).as_ref())
                                .is_some_and(|e| t < *e);
                            (behind || merges_closed).then_some(Refusal::Late(Some(span)))
                        }
                    });
                }
            }
        }
        Ok(out)
    }

    /// Take in this trigger's on-time rows, close what `w` closes, and emit per the output mode.
    pub fn step(
        &mut self,
        on_time: Vec<OnTime>,
        w_prev: Option<EventTime>,
        w: Option<EventTime>,
    ) -> Result<StepOutput> {
        let finishing = w == Some(EventTime::MAX);
        for o in on_time.iter().filter(|_| self.checkpointing) {
            let expiry = match &self.layout {
                Layout::Time { windows, .. } => o
                    .times
                    .iter()
                    .flatten()
                    .map(|t| windows.pane_expiry(windows.pane_of(t)))
                    .max()
                    .unwrap_or(EventTime::MIN),
                _ => EventTime::MAX,
            };
            self.unsaved.push((o.source, o.batch.clone(), expiry));
        }
        let d = self.insert_rows(on_time, w_prev)?;
        // rows no open window needs any more need no checkpoint either
        self.unsaved
            .retain(|(_, _, exp)| w.is_none_or(|w| *exp > w));
        let mut out = StepOutput::default();
        let n = self.n_sources;
        match &mut self.layout {
            Layout::All {
                rows,
                result,
                dirty,
            } => {
                let old = result.take();
                let new = if *dirty || old.is_none() {
                    *dirty = false;
                    self.eval.eval(rows.clone())?
                } else {
                    old.clone()
                        .unwrap_or_else(|| RecordBatch::new_empty(self.eval.out_schema.clone()))
                };
                match self.mode {
                    OutputMode::Complete => out.batches.push(new.clone()),
                    OutputMode::Update => {
                        let emit = if finishing {
                            new.clone()
                        } else {
                            changed_rows(old.as_ref(), &new)?
                        };
                        if emit.num_rows() > 0 {
                            out.batches
                                .push(with_bounds(&self.out, None, &emit, Some(finishing))?);
                        }
                    }
                    OutputMode::Append => {} // refused at create_view
                }
                *result = Some(new);
            }
            Layout::Time {
                windows,
                panes,
                live,
            } => {
                let dirty = &d.windows;
                let closes = |k: &(EventTime, EventTime)| w.is_some_and(|w| k.0 <= w);
                let rows_of = |panes: &Panes, start: EventTime, end: EventTime| {
                    window_rows(panes, start, end, n)
                };
                // 2. open windows this trigger changed (Update, Complete)
                if self.mode != OutputMode::Append {
                    // dirtied by this trigger, or without a result yet (after a restore)
                    let todo: Vec<(EventTime, EventTime)> = live
                        .iter()
                        .filter(|(k, r)| {
                            !closes(k) && (r.is_none() || dirty.binary_search(k).is_ok())
                        })
                        .map(|(k, _)| *k)
                        .collect();
                    for k in todo.iter() {
                        let new = self.eval.eval(rows_of(panes, k.1, k.0))?;
                        let old = live.insert(*k, Some(new.clone())).flatten();
                        if self.mode == OutputMode::Update {
                            let emit = changed_rows(old.as_ref(), &new)?;
                            if emit.num_rows() > 0 {
                                let win = Window {
                                    start: k.1,
                                    end: k.0,
                                };
                                out.batches.push(with_bounds(
                                    &self.out,
                                    Some((win, self.bound.as_ref())),
                                    &emit,
                                    Some(false),
                                )?);
                            }
                        }
                    }
                }
                // 3. windows that close
                let closing: Vec<(EventTime, EventTime)> =
                    live.keys().take_while(|k| closes(k)).copied().collect();
                for k in closing {
                    let cached = live.remove(&k).flatten();
                    let res = match cached {
                        // Update/Complete evaluated dirty windows in step 2; a cache is current
                        Some(r)
                            if self.mode != OutputMode::Append
                                && dirty.binary_search(&k).is_err() =>
                        {
                            r
                        }
                        _ => self.eval.eval(rows_of(panes, k.1, k.0))?,
                    };
                    out.windows_closed += 1;
                    let win = Window {
                        start: k.1,
                        end: k.0,
                    };
                    let fin = (self.mode == OutputMode::Update).then_some(true);
                    let b = with_bounds(&self.out, Some((win, self.bound.as_ref())), &res, fin)?;
                    if self.mode == OutputMode::Complete {
                        self.closed_results.push(b);
                    } else if b.num_rows() > 0 {
                        out.batches.push(b);
                    }
                }
                // 4. evict panes no open window needs
                if let Some(w) = w {
                    let dead: Vec<EventTime> = panes
                        .keys()
                        .take_while(|p| windows.pane_expiry(**p) <= w)
                        .copied()
                        .collect();
                    for p in dead {
                        panes.remove(&p);
                    }
                }
                if self.mode == OutputMode::Complete {
                    out.batches.extend(self.closed_results.all());
                    for (k, r) in live.iter() {
                        if let Some(r) = r {
                            let win = Window {
                                start: k.1,
                                end: k.0,
                            };
                            out.batches.push(with_bounds(
                                &self.out,
                                Some((win, self.bound.as_ref())),
                                r,
                                None,
                            )?);
                        }
                    }
                }
            }
            Layout::Session(s) => {
                let dirty = &d.sessions;
                let mode = self.mode;
                let mut emitted_open = Vec::new();
                let mut closing = Vec::new();
                for (key, list) in s.open.iter_mut() {
                    let mut keep = Vec::new();
                    for mut sess in list.drain(..) {
                        let end = sess.last.saturating_add(s.gap);
                        let win = Window {
                            start: sess.start,
                            end,
                        };
                        if w.is_some_and(|w| end <= w) {
                            closing.push((key.clone(), win, sess));
                            continue;
                        }
                        let is_dirty = dirty.contains(&(key.clone(), sess.start));
                        if mode != OutputMode::Append && (is_dirty || sess.result.is_none()) {
                            let new = self.eval.eval(vec![sess.rows.clone()])?;
                            if mode == OutputMode::Update {
                                emitted_open.push(with_bounds(
                                    &self.out,
                                    Some((win, self.bound.as_ref())),
                                    &new,
                                    Some(false),
                                )?);
                            }
                            sess.result = Some(new);
                        }
                        keep.push(sess);
                    }
                    *list = keep;
                }
                s.open.retain(|_, l| !l.is_empty());
                out.batches.extend(emitted_open);
                closing.sort_by_key(|(_, w, _)| (w.end, w.start));
                for (key, win, sess) in closing {
                    let res = match sess.result {
                        Some(r) if !dirty.contains(&(key.clone(), sess.start)) => r,
                        _ => self.eval.eval(vec![sess.rows])?,
                    };
                    out.windows_closed += 1;
                    let e = s.closed_end.entry(key).or_insert(win.end);
                    *e = (*e).max(win.end);
                    let fin = (mode == OutputMode::Update).then_some(true);
                    let b = with_bounds(&self.out, Some((win, self.bound.as_ref())), &res, fin)?;
                    if mode == OutputMode::Complete {
                        self.closed_results.push(b);
                    } else if b.num_rows() > 0 {
                        out.batches.push(b);
                    }
                }
                if let Some(w) = w {
                    let gap = s.gap;
                    s.closed_end.retain(|_, e| e.saturating_add(gap) > w);
                }
                if mode == OutputMode::Complete {
                    out.batches.extend(self.closed_results.all());
                    for list in s.open.values() {
                        for sess in list {
                            if let Some(r) = &sess.result {
                                let win = Window {
                                    start: sess.start,
                                    end: sess.last.saturating_add(s.gap),
                                };
                                out.batches.push(with_bounds(
                                    &self.out,
                                    Some((win, self.bound.as_ref())),
                                    r,
                                    None,
                                )?);
                            }
                        }
                    }
                }
            }
        }
        out.batches.retain(|b| b.num_rows() > 0);
        Ok(out)
    }

    /// Take rows in: into the buffers of their panes, sessions or the whole
    /// view; returns what they dirtied.
    fn insert_rows(&mut self, on_time: Vec<OnTime>, w_prev: Option<EventTime>) -> Result<Dirty> {
        let n = self.n_sources;
        let mut d = Dirty::default();
        match &mut self.layout {
            Layout::All { rows, dirty, .. } => {
                for o in on_time {
                    if o.batch.num_rows() > 0 {
                        rows[o.source].push(o.batch);
                        *dirty = true;
                    }
                }
            }
            Layout::Time {
                windows,
                panes,
                live,
            } => {
                for o in on_time {
                    for (pane, idx) in group_by(&o.times, |t| windows.pane_of(t)) {
                        let part = take_rows(&o.batch, &idx)?;
                        panes.entry(pane).or_insert_with(|| vec![Vec::new(); n])[o.source]
                            .push(part);
                        for win in windows.windows_of(pane) {
                            if w_prev.is_some_and(|wp| win.end <= wp) {
                                continue; // closed already; the row is on time for a later window
                            }
                            let k = (win.end, win.start);
                            live.entry(k).or_insert(None);
                            d.windows.push(k);
                        }
                    }
                }
                d.windows.sort_unstable();
                d.windows.dedup();
            }
            Layout::Session(s) => d.sessions = s.insert(on_time)?,
        }
        Ok(d)
    }

    /// The buffered state as checkpoint files: the rows of each source
    /// (`rows-{source}`), Complete mode's closed results (`complete-closed`)
    /// and the ends of closed sessions per key (`session-closed`). With
    /// `full` false, only rows and results taken in since the last
    /// checkpoint (sessions always write everything). Returns whether the
    /// files are a full state.
    pub fn export(&mut self, names: &[String], full: bool) -> Result<(Vec<StateFile>, bool)> {
        let full = full || matches!(self.layout, Layout::Session(_));
        let mut per: Vec<(Vec<RecordBatch>, EventTime)> =
            vec![(Vec::new(), EventTime::MIN); self.n_sources];
        if full {
            match &self.layout {
                Layout::All { rows, .. } => {
                    for (i, r) in rows.iter().enumerate() {
                        per[i] = (r.clone(), EventTime::MAX);
                    }
                }
                Layout::Time { panes, windows, .. } => {
                    for (p, by_source) in panes {
                        for (i, b) in by_source.iter().enumerate() {
                            if !b.is_empty() {
                                per[i].0.extend(b.iter().cloned());
                                per[i].1 = per[i].1.max(windows.pane_expiry(*p));
                            }
                        }
                    }
                }
                Layout::Session(s) => {
                    for list in s.open.values() {
                        for sess in list {
                            per[0].0.extend(sess.rows.iter().cloned());
                        }
                    }
                    per[0].1 = EventTime::MAX;
                }
            }
        } else {
            for (i, b, exp) in &self.unsaved {
                per[*i].0.push(b.clone());
                per[*i].1 = per[*i].1.max(*exp);
            }
        }
        self.unsaved.clear();
        let mut files = Vec::new();
        for (i, (batches, expiry)) in per.into_iter().enumerate() {
            let batches: Vec<RecordBatch> =
                batches.into_iter().filter(|b| b.num_rows() > 0).collect();
            if !batches.is_empty() {
                files.push(StateFile {
                    expiry,
                    file: thund_checkpoint::NewFile {
                        operator: format!("rows-{}", names[i]),
                        worker: 0,
                        batches,
                    },
                });
            }
        }
        files.extend(self.closed_results.export(full));
        if let Layout::Session(s) = &self.layout {
            if !s.closed_end.is_empty() {
                let keys: Vec<&[u8]> = s.closed_end.keys().map(|k| k.as_slice()).collect();
                let ends: Vec<EventTime> = s.closed_end.values().copied().collect();
                let schema = Arc::new(Schema::new(vec![
                    Field::new("key", DataType::Binary, false),
                    Field::new("end", DataType::Int64, false),
                ]));
                let b = RecordBatch::try_new(
                    schema,
                    vec![
                        Arc::new(arrow::array::BinaryArray::from(keys)),
                        Arc::new(Int64Array::from(ends)),
                    ],
                )?;
                files.push(StateFile {
                    expiry: EventTime::MAX,
                    file: thund_checkpoint::NewFile {
                        operator: "session-closed".into(),
                        worker: 0,
                        batches: vec![b],
                    },
                });
            }
        }
        Ok((files, full))
    }

    /// Restore what [`Self::export`] wrote, at watermark `w`.
    pub fn import(
        &mut self,
        w: Option<EventTime>,
        rows: Vec<OnTime>,
        closed: Vec<RecordBatch>,
        session_closed: Vec<RecordBatch>,
    ) -> Result<()> {
        self.insert_rows(rows, w)?;
        self.closed_results = ClosedResults::restored(closed);
        self.unsaved.clear();
        if self.mode != OutputMode::Append {
            self.refresh_results()?;
        }
        if let Layout::Session(s) = &mut self.layout {
            for b in session_closed {
                let (Some(k), Some(e)) = (
                    b.column(0)
                        .as_any()
                        .downcast_ref::<arrow::array::BinaryArray>(),
                    b.column(1).as_any().downcast_ref::<Int64Array>(),
                ) else {
                    return Err(Error::Checkpoint(
                        "session-closed has unexpected columns".into(),
                    ));
                };
                for i in 0..b.num_rows() {
                    s.closed_end.insert(k.value(i).to_vec(), e.value(i));
                }
            }
        }
        Ok(())
    }

    /// Evaluate every open window (or session, or the whole view) without
    /// emitting: after a restore, the results an uninterrupted run would
    /// hold, so Update mode emits only what changes from here on.
    fn refresh_results(&mut self) -> Result<()> {
        let n = self.n_sources;
        match &mut self.layout {
            Layout::All {
                rows,
                result,
                dirty,
            } => {
                *result = Some(self.eval.eval(rows.clone())?);
                *dirty = false;
            }
            Layout::Time { panes, live, .. } => {
                for ((end, start), r) in live.iter_mut() {
                    *r = Some(self.eval.eval(window_rows(panes, *start, *end, n))?);
                }
            }
            Layout::Session(s) => {
                for list in s.open.values_mut() {
                    for sess in list.iter_mut() {
                        sess.result = Some(self.eval.eval(vec![sess.rows.clone()])?);
                    }
                }
            }
        }
        Ok(())
    }

    /// Track what changes between checkpoints (a state root is configured).
    pub fn enable_checkpoints(&mut self) {
        self.checkpointing = true;
    }

    /// Rows buffered for open windows (all sources).
    pub fn buffered_rows(&self) -> usize {
        match &self.layout {
            Layout::All { rows, .. } => rows.iter().flatten().map(|b| b.num_rows()).sum(),
            Layout::Time { panes, .. } => panes
                .values()
                .flat_map(|p| p.iter().flatten())
                .map(|b| b.num_rows())
                .sum(),
            Layout::Session(s) => s
                .open
                .values()
                .flatten()
                .flat_map(|x| x.rows.iter())
                .map(|b| b.num_rows())
                .sum(),
        }
    }
}

impl Sessions {
    fn keys(&self, batch: &RecordBatch) -> Result<arrow::row::Rows> {
        let cols: Vec<ArrayRef> = self
            .key_cols
            .iter()
            .map(|i| batch.column(*i).clone())
            .collect();
        Ok(self.converter.convert_columns(&cols)?)
    }

    /// Merge this trigger's rows into the open sessions; returns the (key, start) of sessions that changed.
    fn insert(
        &mut self,
        on_time: Vec<OnTime>,
    ) -> Result<std::collections::HashSet<(Vec<u8>, EventTime)>> {
        let mut dirty = std::collections::HashSet::new();
        for o in on_time {
            if o.batch.num_rows() == 0 {
                continue;
            }
            let keys = self.keys(&o.batch)?;
            let mut by_key: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
            for i in 0..o.batch.num_rows() {
                by_key
                    .entry(keys.row(i).as_ref().to_vec())
                    .or_default()
                    .push(i as u32);
            }
            for (key, idx) in by_key {
                let mut times: Vec<(EventTime, u32)> = idx
                    .iter()
                    .map(|i| (o.times.value(*i as usize), *i))
                    .collect();
                times.sort_unstable();
                let existing = self.open.remove(&key).unwrap_or_default();
                // sweep: existing sessions and the new rows' spans, by start; merge on strict overlap
                let mut items: Vec<(Session, bool)> =
                    existing.into_iter().map(|s| (s, false)).collect();
                items.extend(times.iter().map(|(t, _)| {
                    (
                        Session {
                            start: *t,
                            last: *t,
                            rows: Vec::new(),
                            result: None,
                        },
                        true,
                    )
                }));
                items.sort_by_key(|(s, _)| s.start);
                // an old session that absorbs nothing keeps its cached result
                let mut merged: Vec<(Session, bool)> = Vec::new();
                for (item, is_new) in items {
                    match merged.last_mut() {
                        Some((cur, d)) if item.start < cur.last.saturating_add(self.gap) => {
                            cur.last = cur.last.max(item.last);
                            cur.rows.extend(item.rows);
                            *d |= is_new;
                            cur.result = None;
                        }
                        _ => merged.push((item, is_new)),
                    }
                }
                let starts: Vec<EventTime> = merged.iter().map(|(s, _)| s.start).collect();
                let mut assign: Vec<Vec<u32>> = vec![Vec::new(); merged.len()];
                for (t, i) in &times {
                    let pos = starts.partition_point(|s| s <= t).saturating_sub(1);
                    assign[pos].push(*i);
                }
                let mut list = Vec::with_capacity(merged.len());
                for ((mut s, is_dirty), idx) in merged.into_iter().zip(assign) {
                    if !idx.is_empty() {
                        s.rows.push(take_rows(&o.batch, &idx)?);
                    }
                    if is_dirty {
                        dirty.insert((key.clone(), s.start));
                    }
                    list.push(s);
                }
                self.open.insert(key, list);
            }
        }
        Ok(dirty)
    }
}

/// Rows by pane start, per source.
type Panes = BTreeMap<EventTime, Vec<Vec<RecordBatch>>>;

/// The rows of window `[start, end)`, per source: the panes it spans.
fn window_rows(panes: &Panes, start: EventTime, end: EventTime, n: usize) -> Vec<Vec<RecordBatch>> {
    let mut per = vec![Vec::new(); n];
    for (_, p) in panes.range(start..end) {
        for (i, b) in p.iter().enumerate() {
            per[i].extend(b.iter().cloned());
        }
    }
    per
}

/// Complete mode's emitted closed windows, kept to re-emit them every
/// trigger, and how many of them a checkpoint already holds.
#[derive(Default)]
pub(crate) struct ClosedResults {
    batches: Vec<RecordBatch>,
    saved: usize,
}

impl ClosedResults {
    /// As restored from a checkpoint (all saved).
    pub fn restored(batches: Vec<RecordBatch>) -> Self {
        let saved = batches.len();
        ClosedResults { batches, saved }
    }

    pub fn push(&mut self, b: RecordBatch) {
        self.batches.push(b);
    }

    pub fn all(&self) -> impl Iterator<Item = RecordBatch> + '_ {
        self.batches.iter().cloned()
    }

    /// The `complete-closed` checkpoint file: all results, or those added
    /// since the last checkpoint.
    pub fn export(&mut self, full: bool) -> Option<StateFile> {
        let from = if full { 0 } else { self.saved };
        self.saved = self.batches.len();
        (self.batches.len() > from).then(|| StateFile {
            expiry: EventTime::MAX,
            file: thund_checkpoint::NewFile {
                operator: "complete-closed".into(),
                worker: 0,
                batches: self.batches[from..].to_vec(),
            },
        })
    }
}

/// Group row indices by a function of their (non-null) event time.
fn group_by(
    times: &Int64Array,
    f: impl Fn(EventTime) -> EventTime,
) -> BTreeMap<EventTime, Vec<u32>> {
    let mut m: BTreeMap<EventTime, Vec<u32>> = BTreeMap::new();
    for (i, t) in times.iter().enumerate() {
        if let Some(t) = t {
            m.entry(f(t)).or_default().push(i as u32);
        }
    }
    m
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
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(batch.schema(), cols)?)
}

/// The rows of `new` not in `old`, as multisets (all of `new` if rows cannot be compared).
fn changed_rows(old: Option<&RecordBatch>, new: &RecordBatch) -> Result<RecordBatch> {
    let Some(old) = old else {
        return Ok(new.clone());
    };
    if old.num_rows() == 0 || new.num_rows() == 0 {
        return Ok(new.clone());
    }
    let fields: Vec<SortField> = new
        .schema()
        .fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect();
    let Ok(conv) = RowConverter::new(fields) else {
        return Ok(new.clone());
    };
    let old_rows = conv.convert_columns(old.columns())?;
    let new_rows = conv.convert_columns(new.columns())?;
    let mut counts: HashMap<&[u8], usize> = HashMap::new();
    for i in 0..old_rows.num_rows() {
        *counts.entry(old_rows.row(i).data()).or_default() += 1;
    }
    let mut keep = Vec::new();
    for i in 0..new_rows.num_rows() {
        match counts.get_mut(new_rows.row(i).data()) {
            Some(c) if *c > 0 => *c -= 1,
            _ => keep.push(i as u32),
        }
    }
    take_rows(new, &keep)
}

/// Prefix a query result with its window bounds and, in Update mode, the `final` flag.
fn with_bounds(
    out: &SchemaRef,
    window: Option<(Window, Option<&DataType>)>,
    result: &RecordBatch,
    fin: Option<bool>,
) -> Result<RecordBatch> {
    let n = result.num_rows();
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(out.fields().len());
    if let Some((w, Some(dt))) = window {
        cols.push(bound_column(w.start, dt, n));
        cols.push(bound_column(w.end, dt, n));
    }
    cols.extend(result.columns().iter().cloned());
    if let Some(fin) = fin {
        cols.push(Arc::new(BooleanArray::from(vec![fin; n])));
    }
    Ok(RecordBatch::try_new(out.clone(), cols)?)
}
