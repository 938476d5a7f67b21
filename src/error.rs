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
    /// A TOML view spec that cannot be parsed.
    #[error("cannot read view spec {path}: {message}")]
    SpecFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The view's SQL does not parse, or names an unknown table or column.
    #[error("invalid SQL in view `{view}`: {message}\n  SQL: {sql}")]
    Sql {
        /// The view's name.
        view: String,
        /// The SQL text.
        sql: String,
        /// DataFusion's message.
        message: String,
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
    /// `push` or `trigger` after `finish`.
    #[error("the engine has finished (end of stream); no more input is accepted")]
    Finished,
    /// DataFusion failed while evaluating a view.
    #[error("evaluating view `{view}` failed: {message}")]
    Execution {
        /// The view's name.
        view: String,
        /// DataFusion's or Arrow's message.
        message: String,
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
    /// Writing or reading a checkpoint failed, or a state root cannot be used.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
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

    pub(crate) fn exec(view: &str, e: impl std::fmt::Display) -> Self {
        Error::Execution {
            view: view.to_string(),
            message: e.to_string(),
        }
    }
}
