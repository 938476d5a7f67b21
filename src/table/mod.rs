//! The view as a table: each view's maintained contents (open windows'
//! current rows and closed windows' final rows, kept per the view's
//! [`Retention`](crate::Retention)), published after every trigger as one
//! snapshot of all views, so a reader on any thread sees one whole trigger.
//!
//! * [`Tables::query`]: DataFusion SQL over the views, each a
//!   [`TableProvider`](datafusion::catalog::TableProvider) of the snapshot taken when the query starts (views
//!   join views; an equality on a view's whole key is served by its index);
//! * [`Tables::lookup`]: one key's rows across the windows held, from the
//!   index, without SQL planning (a view is indexed by key from the trigger
//!   after its first lookup; until then its windows hold the batches they
//!   emitted, which the first lookup reads);
//! * [`Tables::subscribe`]: each trigger's emitted rows as a stream, with a
//!   bounded buffer (see [`Change`]).
//!
//! A view's contents replay what it emitted, in its output mode:
//!
//! * **Append**: a closing window's rows are its final rows.
//! * **Update**: a provisional row replaces the row of its window with the
//!   same key (the `GROUP BY` columns; every column under `DISTINCT`; the
//!   empty key for a global aggregate); a view whose rows have no key keeps
//!   every row it emitted. A window's final rows replace all of its rows.
//!   Update mode emits no retractions, so a row an open window no longer has
//!   (a group a `HAVING` or a `LIMIT` dropped) stays until the window closes.
//! * **Complete**: each trigger's output is the whole view.
//!
//! Closed windows (`end ≤ W`) are then kept per the view's retention; open
//! windows always are. The contents are part of every checkpoint (whole,
//! operator `table`), so a resumed engine's tables are those it had.

pub(crate) mod contents;
mod provider;
pub(crate) mod subscribe;

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use datafusion::common::ScalarValue;
use datafusion::prelude::SessionContext;
use parking_lot::RwLock;

use crate::error::{Error, Result};
use crate::time::EventTime;
pub use subscribe::{Change, Subscription};

use contents::Published;

/// All views' contents as of one trigger.
#[derive(Clone, Default)]
pub(crate) struct Snapshot {
    /// The trigger (epoch) the contents are as of; 0 before the first.
    pub epoch: u64,
    pub views: BTreeMap<String, ViewTable>,
}

/// One view in a snapshot.
#[derive(Clone)]
pub(crate) struct ViewTable {
    pub contents: Published,
    /// The view's watermark after that trigger.
    pub watermark: Option<EventTime>,
    /// Where its trigger changes are broadcast (weak: the engine owns the
    /// channel, so subscriptions end when it is dropped).
    pub changes: tokio::sync::broadcast::WeakSender<Arc<subscribe::Emitted>>,
}

/// A handle on the engine's views as tables: cheap to clone, `Send` and
/// `Sync`, so another thread or task can query, look up and subscribe while
/// the engine runs triggers. Every read sees the contents as of one whole
/// trigger (the last one published when the read started).
///
/// ```
/// # use std::{sync::Arc, time::Duration};
/// # use arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
/// # use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
/// # use thund::{Engine, OutputMode, ViewSpec, WindowSpec};
/// # let schema = Arc::new(Schema::new(vec![
/// #     Field::new("auction", DataType::Int64, false),
/// #     Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
/// # ]));
/// let mut engine = Engine::builder().build()?;
/// engine.create_view(
///     ViewSpec::builder("counts", "SELECT auction, COUNT(*) AS n FROM bids GROUP BY auction")
///         .source("bids", "ts", schema.clone())
///         .window(WindowSpec::tumbling(Duration::from_secs(10)))
///         .output(OutputMode::Update)
///         .build()?,
/// )?;
/// let tables = engine.tables();
/// engine.push("bids", RecordBatch::try_new(schema.clone(), vec![
///     Arc::new(Int64Array::from(vec![7, 7, 8])),
///     Arc::new(TimestampMillisecondArray::from(vec![1_000, 2_000, 3_000])),
/// ])?)?;
/// engine.trigger()?;
/// // auction 7's row in the open window [0 s, 10 s): 2 bids so far
/// let rows = tables.lookup("counts", &[7i64.into()])?;
/// assert_eq!(rows.num_rows(), 1);
/// let out = tables.query("SELECT SUM(n) AS bids FROM counts")?;
/// assert_eq!(arrow::util::pretty::pretty_format_batches(&out)?.to_string().contains("| 3    |"), true);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Tables {
    current: Arc<RwLock<Arc<Snapshot>>>,
    /// The runtime blocking queries run on: its own, started by the first
    /// one, so queries never wait for the engine's triggers.
    rt: Arc<std::sync::OnceLock<std::result::Result<tokio::runtime::Runtime, String>>>,
}

impl Tables {
    pub(crate) fn new() -> Self {
        Tables {
            current: Arc::new(RwLock::new(Arc::new(Snapshot::default()))),
            rt: Arc::new(std::sync::OnceLock::new()),
        }
    }

    /// The snapshot in force.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.current.read().clone()
    }

    /// Publish `next` as the snapshot in force.
    pub(crate) fn publish(&self, next: Snapshot) {
        *self.current.write() = Arc::new(next);
    }

    /// The snapshot in force and `view` in it.
    fn entry(&self, view: &str) -> Result<(Arc<Snapshot>, ViewTable)> {
        let snap = self.snapshot();
        let t = snap
            .views
            .get(view)
            .cloned()
            .ok_or_else(|| Error::UnknownView(view.to_string()))?;
        Ok((snap, t))
    }

    /// [`Self::entry`], for reading the view's rows: an error if the engine
    /// keeps no tables.
    fn table(&self, view: &str) -> Result<(Arc<Snapshot>, ViewTable)> {
        let (snap, t) = self.entry(view)?;
        if !t.contents.enabled {
            return Err(Error::Unsupported {
                view: view.to_string(),
                message: "the engine keeps no tables (built with `tables(false)`)".into(),
            });
        }
        Ok((snap, t))
    }

    /// The trigger (epoch) the tables are as of (0 before the first).
    pub fn epoch(&self) -> u64 {
        self.snapshot().epoch
    }

    /// A DataFusion session over the views as of the last trigger, each
    /// registered under its name: any DataFusion SQL runs on it (with `AND`
    /// and `OR` evaluated left to right, row by row, as in views), and all of
    /// its queries see that one trigger, however many run later.
    pub fn session(&self) -> SessionContext {
        let snap = self.snapshot();
        let ctx = crate::paths::sql::session(datafusion::prelude::SessionConfig::new());
        for (name, t) in snap.views.iter().filter(|(_, t)| t.contents.enabled) {
            let table = provider::ViewProvider::new(t.contents.clone());
            // a view name is unique within an engine: registering cannot clash
            let _ = ctx.register_table(name.as_str(), Arc::new(table));
        }
        ctx
    }

    /// Run `sql` over the views as of the last trigger (from a thread that is
    /// not inside an async runtime; from async code use [`Self::query_async`]).
    pub fn query(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::Query {
                sql: sql.to_string(),
                message: "called inside an async runtime: use `query_async` there".into(),
            });
        }
        let rt = self.rt.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("thund-query")
                .build()
                .map_err(|e| e.to_string())
        });
        match rt {
            Ok(rt) => rt.block_on(self.query_async(sql)),
            Err(e) => Err(Error::Query {
                sql: sql.to_string(),
                message: format!("cannot start the query runtime: {e}"),
            }),
        }
    }

    /// [`Self::query`] for async code.
    pub async fn query_async(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let ctx = self.session();
        let err = |e: datafusion::error::DataFusionError| Error::Query {
            sql: sql.to_string(),
            message: e.to_string(),
        };
        let df = ctx.sql(sql).await.map_err(err)?;
        df.collect().await.map_err(err)
    }

    /// The rows of `view` whose key (its `GROUP BY` columns, in order; all
    /// its columns under `DISTINCT`; no values for a global aggregate) is
    /// `key`, across the windows held, ordered by window end: served from
    /// the view's index, without SQL planning. Values are cast to the key
    /// columns' types; one that does not convert is an error naming the
    /// column.
    pub fn lookup(&self, view: &str, key: &[ScalarValue]) -> Result<RecordBatch> {
        let (_, t) = self.table(view)?;
        let arrays: Vec<ArrayRef> = key
            .iter()
            .map(|v| v.to_array_of_size(1))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| Error::Lookup {
                view: view.to_string(),
                message: e.to_string(),
            })?;
        let k = t.contents.layout.encode_key(&arrays)?;
        t.contents.lookup(&k)
    }

    /// The whole contents of `view` as of the last trigger, and that trigger.
    pub fn contents(&self, view: &str) -> Result<(u64, RecordBatch)> {
        let (snap, t) = self.table(view)?;
        Ok((snap.epoch, t.contents.batch()?))
    }

    /// `view`'s watermark as of the trigger the tables are at (`None` = −∞):
    /// every closed window of the table ended at or before it.
    pub fn watermark(&self, view: &str) -> Result<Option<EventTime>> {
        let (_, t) = self.entry(view)?;
        Ok(t.watermark)
    }

    /// How much of `view` the table holds: rows and windows.
    pub fn held(&self, view: &str) -> Result<(usize, usize)> {
        let (_, t) = self.table(view)?;
        t.contents.held()
    }

    /// How many triggers' changes are held for `view`'s subscribers (at most
    /// the engine's [`subscriber_buffer`](crate::EngineBuilder::subscriber_buffer)).
    pub fn backlog(&self, view: &str) -> Result<usize> {
        let (_, t) = self.entry(view)?;
        Ok(t.changes.upgrade().map_or(0, |tx| tx.len()))
    }

    /// Subscribe to `view`'s changes: each trigger's emitted rows from the
    /// next trigger on (see [`Subscription`] for the buffer and what a
    /// subscriber that falls behind is told).
    pub fn subscribe(&self, view: &str) -> Result<Subscription> {
        let (snap, t) = self.entry(view)?;
        // after the engine is gone: a stream that has ended
        let rx = match t.changes.upgrade() {
            Some(tx) => tx.subscribe(),
            None => tokio::sync::broadcast::channel(1).1,
        };
        Ok(Subscription::new(view, rx, self.clone(), snap.epoch))
    }
}

/// The columns of the per-window query's output that identify a row within
/// a window, from DataFusion's functional dependencies: a set of columns on
/// which all the others depend, each value once (the `GROUP BY` columns; all
/// of them under `DISTINCT`). A global aggregate's single row has the empty
/// key. `None`: rows have no key.
pub(crate) fn key_columns(plan: &datafusion::logical_expr::LogicalPlan) -> Option<Vec<usize>> {
    use datafusion::common::Dependency;
    use datafusion::logical_expr::LogicalPlan;
    let n = plan.schema().fields().len();
    let deps = plan.schema().functional_dependencies();
    let key = deps
        .iter()
        .filter(|d| d.mode == Dependency::Single && (0..n).all(|i| d.target_indices.contains(&i)))
        .map(|d| d.source_indices.clone())
        .min_by_key(|s| s.len());
    if key.is_some() {
        return key;
    }
    // `SELECT DISTINCT`: every column (under sorts and aliases only)
    let mut p = plan;
    loop {
        match p {
            LogicalPlan::Sort(x) => p = &x.input,
            LogicalPlan::SubqueryAlias(x) => p = &x.input,
            LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(_)) => {
                return Some((0..n).collect())
            }
            _ => break,
        }
    }
    // one row per window: a global aggregate under projections and filters
    let mut p = plan;
    loop {
        match p {
            LogicalPlan::Projection(x) => p = &x.input,
            LogicalPlan::Filter(x) => p = &x.input,
            LogicalPlan::SubqueryAlias(x) => p = &x.input,
            LogicalPlan::Sort(x) => p = &x.input,
            LogicalPlan::Aggregate(a) if a.group_expr.is_empty() => return Some(Vec::new()),
            _ => return None,
        }
    }
}
