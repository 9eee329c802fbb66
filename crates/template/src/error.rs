//! The engine's errors: [`RenderError`] (execution) and [`Error`] (parse or render).

use crate::parse::ParseError;

/// A render failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// An execution error, in Go's format:
    /// `template: NAME:LINE:COL: executing "NAME" at <NODE>: MESSAGE`.
    #[error(
        "template: {template}:{line}:{col}: executing \"{executing}\" at <{context}>: {message}"
    )]
    Exec {
        /// The template the source was parsed as.
        template: String,
        /// 1-based line of the failing node.
        line: usize,
        /// 0-based byte column of the failing node, as Go counts it.
        col: usize,
        /// The (possibly `define`d) template being executed.
        executing: String,
        /// The failing node's text, cut to 20 characters as Go does.
        context: String,
        message: String,
    },
    #[error("template: {template}: rendered output exceeds {limit} bytes")]
    OutputTooLarge { template: String, limit: usize },
    #[error("template: {template}: execution exceeded {limit} steps")]
    TooManySteps { template: String, limit: u64 },
    #[error("template: {template}: data nested deeper than {limit} levels")]
    DataTooDeep { template: String, limit: usize },
}

/// Either failure, for callers that parse and render in one go.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Render(#[from] RenderError),
}
