//! Loki's live tail over the stores: the lines of a LogQL log query already stored since a start
//! time, then each line as it is committed, through the same pipeline as a log query. The live
//! part is the tail every other reader uses ([`crate::query::tail`]), polling with what of the
//! query a poll can check ([`plan::tail_filter`]); the engine checks each row it brings.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio_stream::StreamExt;

use super::read::{nanos, Entry, Streams, TimeRange};
use crate::error::HttpError;
use crate::loki::logql::ast::LogQuery;
use crate::loki::logql::labels::Labels;
use crate::loki::logql::pipeline::Pipeline;
use crate::loki::logql::plan;
use crate::model::selection::Order;
use crate::query::tail::{self, Follow};
use crate::query::Reads;

/// A running Loki tail.
#[derive(Debug)]
pub(crate) struct LokiTail {
    /// The newest lines since the start time when the tail opened, oldest first.
    pub backfill: Streams,
    live: Follow,
    pipeline: Pipeline,
    /// The backfill's lines, as their time and a hash of their labels and text, so that a line
    /// committed while the tail opened, which both parts may bring, is sent once (Loki too keeps
    /// one of a stream's lines with the same time and text). Hashes, since the set lives as long
    /// as the tail does and the lines themselves are sent and dropped.
    backfilled: HashSet<(i64, u64)>,
    hasher: RandomState,
    /// The backfill's end: no later line can be in it.
    backfilled_until: i64,
}

impl Reads {
    /// Opens a tail of `query` for `tenant`: the newest `limit` lines since `start`, then every
    /// line committed from now on, each once: none falls between the parts.
    pub(crate) async fn loki_tail(
        &self,
        tenant: &Arc<str>,
        query: &LogQuery,
        start: DateTime<Utc>,
        limit: usize,
    ) -> Result<LokiTail, HttpError> {
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
            let mut charge = self.charge(tenant);
            (backfill, _) = self
                .loki_logs(tenant, query, range, limit, Order::Newest, &mut charge)
                .await?;
            for entries in backfill.streams.values_mut() {
                entries.reverse();
            }
        }
        Ok(LokiTail::new(backfill, live, pipeline, nanos(now)))
    }
}

impl LokiTail {
    fn new(backfill: Streams, live: Follow, pipeline: Pipeline, backfilled_until: i64) -> Self {
        let hasher = RandomState::new();
        let mut backfilled = HashSet::new();
        for (labels, entries) in &backfill.streams {
            for entry in entries {
                backfilled.insert((entry.ts, hasher.hash_one((labels, &entry.line))));
            }
        }
        LokiTail {
            backfill,
            live,
            pipeline,
            backfilled,
            hasher,
            backfilled_until,
        }
    }

    /// Whether the backfill already brought this line.
    fn already_sent(&self, labels: &Labels, entry: &Entry) -> bool {
        entry.ts <= self.backfilled_until
            && self
                .backfilled
                .contains(&(entry.ts, self.hasher.hash_one((labels, &entry.line))))
    }

    /// The next lines committed that the query matches, grouped by their labels in commit
    /// order; an error says why the tail ended, `None` that it ended without one.
    pub(crate) async fn next(&mut self) -> Option<Result<Streams, HttpError>> {
        while let Some(polled) = self.live.next().await {
            let rows = match polled {
                Ok(rows) => rows,
                Err(err) => return Some(Err(err.into())),
            };
            let mut lines = Streams::default();
            for row in rows {
                let Some((output, metadata)) = self.pipeline.process_with_metadata(&row) else {
                    continue;
                };
                let entry = Entry {
                    ts: nanos(row.ts),
                    line: output.line.into_owned(),
                };
                if !self.already_sent(&output.labels, &entry) {
                    // Loki's ingesters send a live line with its stream's labels and what the
                    // query's stages made, without the structured metadata (`detected_level`
                    // among it) that its queries, and so the backfill, add.
                    let mut labels = output.labels;
                    for (name, value) in metadata {
                        if labels.get(&name) == Some(&value) {
                            labels.remove(&name);
                        }
                    }
                    lines.streams.entry(labels).or_default().push(entry);
                }
            }
            if !lines.streams.is_empty() {
                return Some(Ok(lines));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loki::logql::ast::Query;
    use crate::observability::metrics::Registry;
    use crate::query::admission::{Admission, AdmissionLimits};
    use crate::query::metrics::QueryMetrics;
    use crate::query::tail::Follow;
    use crate::query::tail_queue::queue;
    use crate::storage::StoredRow;

    fn row(id: i64, second: i64, message: &str) -> StoredRow {
        let ts = DateTime::from_timestamp(second, 0).unwrap();
        StoredRow {
            id,
            ts,
            received_at: ts,
            severity: 9,
            service: "api".into(),
            message: message.into(),
            labels: r#"{"env":"prod"}"#.into(),
            attributes: r#"{"user":"ann"}"#.into(),
            trace_id: None,
            span_id: None,
        }
    }

    #[tokio::test]
    async fn a_line_the_backfill_brought_is_not_sent_again_live() {
        let Query::Log(query) = crate::loki::logql::parse(r#"{service_name="api"}"#).unwrap()
        else {
            panic!("a log query");
        };
        let pipeline = Pipeline::compile(&query).unwrap();
        // Committed while the tail opened: the backfill read it, and so does the first poll.
        let both = row(1, 100, "committed while the tail opened");
        let output = pipeline.process(&both).unwrap();
        let mut backfill = Streams::default();
        backfill
            .streams
            .entry(output.labels.clone())
            .or_default()
            .push(Entry {
                ts: nanos(both.ts),
                line: output.line.into_owned(),
            });
        let metrics = QueryMetrics::register(&Registry::new());
        let (sender, receiver) = queue(1 << 20, metrics.tail_queued_bytes.clone());
        let admission = Admission::new(
            AdmissionLimits {
                reads_per_tenant: 1,
                tails: 1,
                tails_per_tenant: 1,
            },
            &metrics,
        );
        let place = admission.tail(&Arc::from("tenant")).unwrap();
        let until = nanos(both.ts) + 1_000_000_000;
        let mut tail = LokiTail::new(backfill, Follow::of(receiver, place), pipeline, until);
        let polled = vec![
            both,
            row(2, 100, "another line at the same time"),
            // The same text at a time the backfill did not reach is a line of its own.
            row(3, 200, "committed while the tail opened"),
        ];
        assert!(sender.push(polled));
        sender.finish(None, false);

        let live = tail.next().await.unwrap().unwrap();
        let mut live_labels = output.labels.clone();
        assert!(live_labels.remove("detected_level").is_some());
        assert!(live_labels.remove("user").is_some());
        assert_eq!(
            live_labels.keys().collect::<Vec<_>>(),
            ["env", "service_name"],
            "a live line carries its stream's labels"
        );
        assert_eq!(
            live.streams.len(),
            1,
            "live lines carry no structured metadata"
        );
        let sent: Vec<(i64, &str)> = live.streams[&live_labels]
            .iter()
            .map(|e| (e.ts / 1_000_000_000, e.line.as_str()))
            .collect();
        assert_eq!(
            sent,
            [
                (100, "another line at the same time"),
                (200, "committed while the tail opened")
            ]
        );
        assert!(tail.next().await.is_none());
    }
}
