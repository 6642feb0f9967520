//! Loki's live tail over the stores: the lines of a LogQL log query already stored since a start
//! time, then each line as it is committed, through the same pipeline as a log query. The live
//! part is the tail every other reader uses ([`super::tail`]), polling with what of the query a
//! poll can check ([`plan::tail_filter`]); the engine checks each row it brings.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio_stream::StreamExt;

use super::loki::{nanos, Entry, LokiError, Streams, TimeRange};
use super::tail::{self, Follow};
use super::Reads;
use crate::logql::ast::LogQuery;
use crate::logql::pipeline::Pipeline;
use crate::logql::plan;
use crate::model::selection::Order;

/// A running Loki tail.
#[derive(Debug)]
pub struct LokiTail {
    /// The newest lines since the start time when the tail opened, oldest first.
    pub backfill: Streams,
    live: Follow,
    pipeline: Pipeline,
}

impl Reads {
    /// Opens a tail of `query` for `tenant`: the newest `limit` lines since `start`, then every
    /// line committed from now on. A line committed while the tail opens may come in both parts;
    /// none falls between them.
    pub async fn loki_tail(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        start: DateTime<Utc>,
        limit: usize,
    ) -> Result<LokiTail, LokiError> {
        let pipeline = Pipeline::compile(query)?;
        // Live first: what is committed during the backfill is then not missed.
        let live = tail::open(self, tenant, plan::tail_filter(query), None).await?;
        let now = Utc::now();
        let mut backfill = Streams::default();
        if start < now {
            let range = TimeRange {
                from: start,
                to: now,
            };
            (backfill, _) = self
                .loki_logs(tenant, query, range, limit, Order::Newest)
                .await?;
            for entries in backfill.streams.values_mut() {
                entries.reverse();
            }
        }
        Ok(LokiTail {
            backfill,
            live,
            pipeline,
        })
    }
}

impl LokiTail {
    /// The next lines committed that the query matches, grouped by their labels in commit
    /// order; an error says why the tail ended, `None` that it ended without one.
    pub async fn next(&mut self) -> Option<Result<Streams, LokiError>> {
        while let Some(polled) = self.live.next().await {
            let rows = match polled {
                Ok(rows) => rows,
                Err(err) => return Some(Err(err.into())),
            };
            let mut lines = Streams::default();
            for row in rows {
                if let Some(output) = self.pipeline.process(&row) {
                    lines.streams.entry(output.labels).or_default().push(Entry {
                        ts: nanos(row.ts),
                        line: output.line,
                    });
                }
            }
            if !lines.streams.is_empty() {
                return Some(Ok(lines));
            }
        }
        None
    }
}
