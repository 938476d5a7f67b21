//! The view's plan: which path runs it and why.
//!
//! Planning decides, rendering obeys (conventions §2): the decision is made
//! once, at `create_view`, and every trigger report and `explain` shows it.

use serde::{Deserialize, Serialize};

use crate::spec::{ExecMode, ViewSpec};

/// Which path evaluates a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    /// timely/differential-dataflow arrangements keyed by window.
    Incremental,
    /// DataFusion over the buffered rows of dirty or closing windows.
    Recompute,
}

impl std::fmt::Display for PathKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PathKind::Incremental => "incremental",
            PathKind::Recompute => "recompute",
        })
    }
}

/// The plan of one view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ViewPlan {
    /// Evaluate the SQL with DataFusion per window; `reason` says why this path.
    Recompute {
        /// Why the view is not incremental, in words a user understands.
        reason: String,
    },
}

impl ViewPlan {
    /// Decide the plan of a validated view.
    pub fn decide(spec: &ViewSpec) -> ViewPlan {
        let reason = match spec.mode {
            ExecMode::Recompute => "mode = \"recompute\" was requested".to_string(),
            ExecMode::Auto => "this build has no incremental path yet; every view is recomputed \
                               per dirty or closing window"
                .to_string(),
        };
        ViewPlan::Recompute { reason }
    }

    /// The path this plan takes.
    pub fn path(&self) -> PathKind {
        match self {
            ViewPlan::Recompute { .. } => PathKind::Recompute,
        }
    }

    /// Why this path (empty for an incremental plan).
    pub fn reason(&self) -> &str {
        match self {
            ViewPlan::Recompute { reason } => reason,
        }
    }
}
