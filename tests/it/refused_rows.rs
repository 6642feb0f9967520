//! A row the database refuses fails alone, whatever error it is refused with: not only the
//! SQLSTATE classes of bad data (22, 23, 54) but an error raised by a trigger (PostgreSQL's
//! `RAISE EXCEPTION`, SQLSTATE P0001; on SQLite an SQL error from a function the trigger calls).
//! The batch is split until the row is alone, the row is rejected as `storage_refused`, every
//! other record is stored, and the service stays ready.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::process::Process;
use crate::common::{http_get, metric, push_as, record, Backend, TestDb};
use crate::http_ingest::{loki_push, post, snappy, LOKI, PROTOBUF};
use loghaul::proto::v1::log_ingest_client::LogIngestClient;
use prost::Message;

/// The one message text the trigger refuses.
const POISON: &str = "poison-row";
const KEY: &str = "k-refused-rows";
const STREAMS: usize = 16;
const CHUNKS: usize = 4;
const PER_CHUNK: usize = 50;
/// The stream, and its record (counted across the stream), that carries the poison.
const POISONED_STREAM: usize = 5;
const POISONED_INDEX: usize = 2 * PER_CHUNK + 7;
const PUSHES: usize = 16;
const LINES: usize = 20;
const POISONED_PUSH: usize = 7;
const POISONED_LINE: usize = 3;

/// A trigger that refuses the row whose message is [`POISON`] with an error no data class names.
async fn refuse_the_poison(db: &TestDb) {
    match db.backend {
        Backend::Postgres => {
            db.execute(&format!(
                "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN IF NEW.message = '{POISON}' THEN \
                 RAISE EXCEPTION 'this text is not wanted here'; END IF; RETURN NEW; END $$"
            ))
            .await;
            db.execute(
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON logs \
                 FOR EACH ROW EXECUTE FUNCTION refuse_poison()",
            )
            .await;
        }
        Backend::Sqlite => {
            // json() of text that is not JSON fails with SQLITE_ERROR, not a constraint.
            db.execute(&format!(
                "CREATE TRIGGER refuse_poison BEFORE INSERT ON logs \
                 WHEN NEW.message = '{POISON}' BEGIN SELECT json('not json'); END"
            ))
            .await;
        }
    }
}

async fn a_row_refused_by_a_trigger_fails_alone(db: &TestDb) {
    if db.skipped_on_citus(
        "refused_rows",
        "Citus does not fire triggers on distributed tables",
    ) {
        return;
    }
    // A process of its own, so its counters are its own; a short retry timeout bounds how long
    // an error wrongly taken for an outage can hold the batches.
    let tenant = format!("{KEY}=rows");
    let server = Process::serve(
        &db.url,
        &[
            "--api-keys",
            &tenant,
            "--store-retry-timeout",
            "3s",
            "--batch-linger",
            "50ms",
        ],
    );
    refuse_the_poison(db).await;

    // /readyz, polled while the pushes run: a refused row is no outage.
    let not_ready = Arc::new(AtomicUsize::new(0));
    let (done, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = tokio::spawn({
        let not_ready = Arc::clone(&not_ready);
        let http = server.http;
        async move {
            let mut polls = 0;
            loop {
                if !matches!(http_get(http, "/readyz").await, Ok((200, _))) {
                    not_ready.fetch_add(1, Ordering::Relaxed);
                }
                polls += 1;
                tokio::select! {
                    _ = &mut stopped => return polls,
                    () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
                }
            }
        }
    });

    let endpoint = format!("http://{}", server.grpc);
    let streams = (0..STREAMS).map(|stream| {
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let chunks = (0..CHUNKS)
                .map(|chunk| {
                    (0..PER_CHUNK)
                        .map(|n| {
                            let index = chunk * PER_CHUNK + n;
                            if stream == POISONED_STREAM && index == POISONED_INDEX {
                                record(POISON)
                            } else {
                                record(format!("g{stream}-{index}"))
                            }
                        })
                        .collect()
                })
                .collect();
            let mut client = LogIngestClient::connect(endpoint).await.unwrap();
            push_as(&mut client, KEY, chunks).await
        })
    });
    let streams: Vec<_> = streams.collect();
    let pushes: Vec<_> = (0..PUSHES)
        .map(|push| {
            let ingest = server.http_ingest;
            tokio::spawn(async move {
                let lines: Vec<String> = (0..LINES)
                    .map(|line| {
                        if push == POISONED_PUSH && line == POISONED_LINE {
                            POISON.to_owned()
                        } else {
                            format!("l{push}-{line}")
                        }
                    })
                    .collect();
                let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
                let labels = format!("{{job=\"refused-rows\", push=\"{push}\"}}");
                let body = snappy(&loki_push(&[(&labels, &lines)]).encode_to_vec());
                post(ingest, LOKI, &[PROTOBUF, ("x-api-key", KEY)], &body).await
            })
        })
        .collect();

    // Counted first and asserted after, so that a failure shows every number.
    let mut streams_ok = 0;
    let mut accepted = 0;
    for (stream, outcome) in streams.into_iter().enumerate() {
        match outcome.await.unwrap() {
            Ok(response) => {
                accepted += response.accepted;
                let refused = response.rejections.iter().map(|rejection| {
                    let storage = rejection.reason.starts_with("storage_refused: ");
                    (rejection.index, storage)
                });
                let expected = if stream == POISONED_STREAM {
                    vec![(POISONED_INDEX as u64, true)]
                } else {
                    vec![]
                };
                if refused.collect::<Vec<_>>() == expected {
                    streams_ok += 1;
                } else {
                    eprintln!("stream {stream}: {response:?}");
                }
            }
            Err(status) => eprintln!("stream {stream} failed: {status:?}"),
        }
    }
    let mut pushes_ok = 0;
    for (push, answer) in pushes.into_iter().enumerate() {
        let answer = answer.await.unwrap();
        let text = answer.text();
        let expected = if push == POISONED_PUSH {
            answer.status == 400
                && text.starts_with("1 of 20 entries rejected")
                && text.contains(&format!("#{POISONED_LINE} storage_refused"))
        } else {
            answer.status == 204
        };
        if expected {
            pushes_ok += 1;
        } else {
            eprintln!("Loki push {push}: {} {text}", answer.status);
        }
    }
    let _ = done.send(());
    let polls = watcher.await.unwrap();

    let stored = db.count().await;
    let metrics = server.metrics().await;
    let retried = metric(
        &metrics,
        "loghaul_insert_errors_total{kind=\"unavailable\"}",
    );
    let isolated = metric(
        &metrics,
        "loghaul_insert_errors_total{kind=\"row_rejected\"}",
    );
    let not_ready = not_ready.load(Ordering::Relaxed);
    eprintln!(
        "{:?}: {streams_ok} of {STREAMS} gRPC streams and {pushes_ok} of {PUSHES} Loki pushes \
         answered as expected; {stored} rows stored; {retried} inserts retried as unavailable, \
         {isolated} refused as the row's; not ready at {not_ready} of {polls} polls",
        db.backend
    );
    assert_eq!(streams_ok, STREAMS);
    assert_eq!(pushes_ok, PUSHES);
    let records = STREAMS * CHUNKS * PER_CHUNK + PUSHES * LINES;
    assert_eq!(accepted, (STREAMS * CHUNKS * PER_CHUNK - 1) as u64);
    assert_eq!(
        stored,
        records as i64 - 2,
        "every record but the two poisoned"
    );
    assert_eq!(retried, 0.0, "a refused row is not an outage: {metrics}");
    assert!(isolated >= 2.0, "{metrics}");
    assert_eq!(not_ready, 0, "readiness stays on");
    let poisoned = db
        .query_scalar(&format!(
            "SELECT count(*) FROM logs WHERE message = '{POISON}'"
        ))
        .await;
    assert_eq!(poisoned, 0);
}
on_both_backends!(
    a_row_refused_by_a_trigger,
    a_row_refused_by_a_trigger_fails_alone
);
