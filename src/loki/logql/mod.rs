//! LogQL, the query language of Loki's HTTP API, in the subset Grafana's Loki data source and
//! people use: stream selectors, line filters (with `or` and `ip()`), the parsers `| json`,
//! `| logfmt`, `| regexp`, `| pattern` and `| unpack` with label filters, `line_format` and
//! `label_format` templates, `decolorize`, `drop` and `keep`; range functions of lines
//! (`count_over_time`, `rate`, `bytes_over_time`, `bytes_rate`, `absent_over_time`) and of
//! `| unwrap`ped values (`sum_over_time`, `quantile_over_time`, `rate_counter`, …), with
//! `offset`; aggregations (`sum`, `count`, `avg`, `min`, `max`, `topk`, `bottomk`, `sort`,
//! `sort_desc`) with `by`/`without`; arithmetic, comparisons and set operators with `bool`,
//! `on`/`ignoring` and `group_left`/`group_right`; `label_replace` and `vector(n)`. A query that
//! is not LogQL is refused in Loki's words and at Loki's place; LogQL loghaul does not run, with
//! a message naming it and where it is.
//!
//! - [`lexer`]: tokens with their offsets, durations and sizes as Loki writes them, and their
//!   names in Loki's syntax errors.
//! - [`ast`]: what a parsed query says.
//! - [`parser`]: the grammar, and the limits (length, nesting, range) a hostile query meets first.
//! - [`pipeline`]: a log query compiled and run on each row, with the stages' own modules:
//!   `template` (Go templates), `pattern`, `ip`, `logfmt` (the decoder of `--strict`) and
//!   `extract` (JSON expressions, `unpack`, `regexp`, `decolorize`).
//! - `validate`, `go_regex`: Loki's checks of a parsed query, and Go's words for a regular
//!   expression that does not compile.
//! - `go_numbers`: Go's parsers of numbers, durations and sizes in label values, with their
//!   error texts.
//! - `format`, `pretty`: a query written back as Loki writes it, on one line or laid out.
//! - [`eval`], [`binary`], [`samples`], [`unwrap`]: metric values as Loki computes them.

pub(crate) mod ast;
pub(crate) mod binary;
pub(crate) mod eval;
mod extract;
mod format;
pub(crate) mod go_numbers;
mod go_regex;
mod go_time;
pub(crate) mod hints;
mod ip;
pub(crate) mod json_object;
pub(crate) mod labels;
pub(crate) mod lexer;
mod logfmt;
pub(crate) mod parser;
mod pattern;
pub(crate) mod pipeline;
pub(crate) mod plan;
mod pretty;
pub(crate) mod samples;
mod template;
pub(crate) mod unwrap;
mod validate;

pub use ast::Query;
pub use parser::parse;
pub(crate) use pretty::pretty;

/// Why a query could not be parsed: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The byte offset in the query where the problem is.
    pub position: usize,
    /// The line of that offset, from 1.
    pub line: usize,
    /// Its column in the line, in characters, from 1.
    pub column: usize,
    /// What is wrong, for the person who wrote the query.
    pub message: String,
    /// False for the checks Loki makes of a whole expression (a function's parameter, its
    /// grouping), whose message it gives without a place: `parse error : …`.
    pub placed: bool,
    /// True where Loki's lexer had read ahead of the token it reports (`==`, `[5m]`, `5m`),
    /// which leaves its position without a line: its message says `line 0`.
    pub line_lost: bool,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.placed {
            let line = if self.line_lost { 0 } else { self.line };
            let (column, message) = (self.column, &self.message);
            write!(f, "parse error at line {line}, col {column}: {message}")
        } else {
            write!(f, "parse error : {}", self.message)
        }
    }
}

impl std::error::Error for ParseError {}

impl ParseError {
    /// An error at byte `position` of a one-line query; [`ParseError::in_text`] places it in a
    /// query of several lines.
    pub fn at(position: usize, message: impl Into<String>) -> Self {
        ParseError {
            position,
            line: 1,
            column: position + 1,
            message: message.into(),
            placed: true,
            line_lost: false,
        }
    }

    /// The error as Loki places it after reading ahead of its token: `line 0`.
    pub fn line_lost(self) -> Self {
        ParseError {
            line_lost: true,
            ..self
        }
    }

    /// An error about the expression at `position` that Loki reports without a place.
    pub fn unplaced(position: usize, message: impl Into<String>) -> Self {
        ParseError {
            placed: false,
            ..ParseError::at(position, message)
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
