//! LogQL, the query language of Loki's HTTP API, in the subset Grafana's Loki data source and
//! people use: stream selectors, line filters (with `or` and `ip()`), the parsers `| json`,
//! `| logfmt`, `| regexp`, `| pattern` and `| unpack` with label filters, `line_format` and
//! `label_format` templates, `decolorize`, `drop` and `keep`; range functions
//! (`count_over_time`, `rate`, `bytes_over_time`, `bytes_rate`) under
//! `sum`/`count`/`avg`/`min`/`max`/`topk` with `by`/`without`; arithmetic and `vector(n)`.
//! Anything else is refused with a message naming it and where it is.
//!
//! - [`lexer`]: tokens with their offsets, durations and sizes as Loki writes them.
//! - [`ast`]: what a parsed query says.
//! - [`parser`]: the grammar, and the limits (length, nesting, range) a hostile query meets first.
//! - [`pipeline`]: a log query compiled and run on each row, with the stages' own modules:
//!   `template` (Go templates), `pattern`, `ip`, `logfmt` (the decoder of `--strict`) and
//!   `extract` (JSON expressions, `unpack`, `regexp`, `decolorize`).

pub(crate) mod ast;
pub(crate) mod eval;
mod extract;
mod format;
mod ip;
pub(crate) mod labels;
pub(crate) mod lexer;
mod logfmt;
pub(crate) mod parser;
mod pattern;
pub(crate) mod pipeline;
pub(crate) mod plan;
mod template;

pub use ast::Query;
pub use parser::parse;

/// Why a query could not be parsed: where and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("parse error at line {line}, col {column}: {message}")]
pub struct ParseError {
    /// The byte offset in the query where the problem is.
    pub position: usize,
    /// The line of that offset, from 1.
    pub line: usize,
    /// Its column in the line, in characters, from 1.
    pub column: usize,
    /// What is wrong, for the person who wrote the query.
    pub message: String,
}

impl ParseError {
    /// An error at byte `position` of a one-line query; [`ParseError::in_text`] places it in a
    /// query of several lines.
    pub fn at(position: usize, message: impl Into<String>) -> Self {
        ParseError {
            position,
            line: 1,
            column: position + 1,
            message: message.into(),
        }
    }

    /// The error with its line and column counted in `text`.
    pub fn in_text(mut self, text: &str) -> Self {
        let before = &text[..self.position.min(text.len())];
        self.line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |at| at + 1);
        self.column = before[line_start..].chars().count() + 1;
        self
    }
}
