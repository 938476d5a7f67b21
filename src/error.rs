//! One error type for the `thund` crate, with variants by phase.

use std::path::PathBuf;

/// `Result` with [`enum@Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in Þund, by phase: spec, plan, input, execution, I/O.
///
/// Input errors name what is at fault (source, column, row, file); an error
/// returned by [`crate::Engine::push`] leaves the engine exactly as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The view spec is invalid (a field, a duration, a window, a source).
    #[error("invalid view spec `{view}`: {message}")]
    Spec {
        /// The view's name.
        view: String,
        /// What is wrong.
        message: String,
    },
    /// A SQL DDL text (`CREATE SOURCE`, `CREATE VIEW`) that is not right:
    /// which statement (1-based; 0 for the text as a whole) and where.
    #[error("invalid DDL at line {line}, column {column}: {message}")]
    Ddl {
        /// The statement's number, 1-based (0: the text as a whole).
        statement: usize,
        /// The line of the token at fault, 1-based.
        line: u64,
        /// Its column, 1-based.
        column: u64,
        /// What is wrong, naming the statement.
        message: String,
    },
    /// A TOML view spec that cannot be parsed.
    #[error("cannot read view spec {path}: {message}")]
    SpecFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The view's SQL does not parse, or names an unknown table or column.
    #[error("invalid SQL in view `{view}`: {source}\n  SQL: {sql}")]
    Sql {
        /// The view's name.
        view: String,
        /// The SQL text.
        sql: String,
        /// DataFusion's error.
        source: Box<datafusion::error::DataFusionError>,
    },
    /// A view with this name exists already.
    #[error("a view named `{0}` exists already")]
    DuplicateView(String),
    /// No view of that name.
    #[error("no view named `{0}`")]
    UnknownView(String),
    /// A batch was pushed for a source that no view reads.
    #[error("no view reads a source named `{source_name}` (known sources: {known})")]
    UnknownSource {
        /// The source named in the call.
        source_name: String,
        /// The sources views read, comma-separated.
        known: String,
    },
    /// A pushed batch does not have the source's schema.
    #[error("batch for source `{source_name}` does not match its schema: {message}")]
    SchemaMismatch {
        /// The source.
        source_name: String,
        /// Which column differs and how.
        message: String,
    },
    /// The view mode is not possible for the query (for example Append without a window).
    #[error("view `{view}`: {message}")]
    Unsupported {
        /// The view's name.
        view: String,
        /// What is not supported and what to do instead.
        message: String,
    },
    /// A lookup in a view's table that cannot be served: the view has no
    /// key, or the key values do not fit its columns.
    #[error("lookup in view `{view}`: {message}")]
    Lookup {
        /// The view's name.
        view: String,
        /// What is wrong.
        message: String,
    },
    /// A query over the views' tables failed (it does not parse, names an
    /// unknown view or column, or fails to run).
    #[error("query over the views failed: {message}\n  SQL: {sql}")]
    Query {
        /// The query.
        sql: String,
        /// DataFusion's error.
        message: String,
    },
    /// `push` or `trigger` after `finish`.
    #[error("the engine has finished (end of stream); no more input is accepted")]
    Finished,
    /// DataFusion failed while evaluating a view's expressions or query.
    #[error("evaluating view `{view}` failed: {source}")]
    Evaluation {
        /// The view's name.
        view: String,
        /// DataFusion's error.
        source: Box<datafusion::error::DataFusionError>,
    },
    /// An aggregate's value does not fit the type its SQL declares.
    #[error("view `{view}`: {aggregate} overflows {data_type} in window [{window_start}, {window_end}) (value {value})")]
    Overflow {
        /// The view's name.
        view: String,
        /// The aggregate, for example `Sum(price)`.
        aggregate: String,
        /// The SQL result type.
        data_type: String,
        /// Start of the window (ms).
        window_start: i64,
        /// End of the window (ms).
        window_end: i64,
        /// The value that does not fit.
        value: String,
    },
    /// The view's dataflow failed.
    #[error("the dataflow of view `{view}` failed: {source}")]
    Dataflow {
        /// The view's name.
        view: String,
        /// The dataflow's error.
        source: thund_dataflows::Error,
    },
    /// An input file that cannot be read.
    #[error("input {path}: {message}")]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong (with the row where known).
        message: String,
    },
    /// An output file that cannot be written.
    #[error("output {path}: {message}")]
    Output {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The checkpoint store failed, or a state root cannot be used.
    #[error("checkpoint of {context}: {source}")]
    Checkpoint {
        /// What was being checkpointed or restored: `view `v``, a state root URL.
        context: String,
        /// The store's error.
        source: std::sync::Arc<thund_checkpoint::Error>,
    },
    /// The state root holds a checkpoint of a different view under this
    /// name: the SQL, a schema, the window, the watermark, the output mode
    /// or the plan changed.
    #[error("view `{view}` does not match its checkpoint (epoch {epoch}): changed {}; resume with the view as it was checkpointed, or use a new state root", changed.join("; "))]
    ViewChanged {
        /// The view's name.
        view: String,
        /// The checkpoint epoch compared with.
        epoch: u64,
        /// What changed, in words, with the stored and the new value.
        changed: Vec<String>,
    },
    /// Stored state that does not decode as this view's state.
    #[error("checkpoint of view `{view}`: stored state does not fit the view: {message}")]
    CheckpointFormat {
        /// The view's name.
        view: String,
        /// What does not fit.
        message: String,
    },
    /// [`crate::Engine::checkpoint`] on an engine built without a state root.
    #[error("no state root: build the engine with `with_state_root(url)` to take checkpoints")]
    NoStateRoot,
    /// The live runner ([`crate::live::Live`]) was set up wrongly or lost its engine.
    #[error("live runner: {0}")]
    Live(String),
    /// The checkpoint sidecar thread could not start or has stopped.
    #[error("the checkpoint sidecar {0}")]
    Sidecar(String),
    /// The engine's async runtime (for DataFusion) could not start.
    #[error("cannot start the engine's async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A broken internal invariant: a bug in Þund, not in the input.
    #[error("internal error in view `{view}` (please report): {message}")]
    Internal {
        /// The view's name.
        view: String,
        /// What went wrong.
        message: String,
    },
    /// Arrow failed on data the engine built (not user input).
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

impl Error {
    pub(crate) fn spec(view: &str, message: impl Into<String>) -> Self {
        Error::Spec {
            view: view.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn eval(view: &str, e: datafusion::error::DataFusionError) -> Self {
        Error::Evaluation {
            view: view.to_string(),
            source: Box::new(e),
        }
    }

    pub(crate) fn dataflow(view: &str, e: thund_dataflows::Error) -> Self {
        match e {
            // an accumulator past its 128 bits: the overflow the recompute path reports too
            thund_dataflows::Error::Overflow {
                kind,
                window,
                detail,
                ..
            } => Error::Overflow {
                view: view.to_string(),
                aggregate: match detail.is_empty() {
                    true => format!("{kind:?}"),
                    false => detail,
                },
                data_type: "a 128-bit accumulator".to_string(),
                window_start: window.map_or(i64::MIN, |w| w.start),
                window_end: window.map_or(i64::MAX, |w| w.end),
                value: "beyond 128 bits".to_string(),
            },
            e => Error::Dataflow {
                view: view.to_string(),
                source: e,
            },
        }
    }

    pub(crate) fn checkpoint(context: impl Into<String>, e: thund_checkpoint::Error) -> Self {
        Error::Checkpoint {
            context: context.into(),
            source: std::sync::Arc::new(e),
        }
    }

    pub(crate) fn internal(view: &str, message: impl Into<String>) -> Self {
        Error::Internal {
            view: view.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn format(view: &str, message: impl Into<String>) -> Self {
        Error::CheckpointFormat {
            view: view.to_string(),
            message: message.into(),
        }
    }
}
