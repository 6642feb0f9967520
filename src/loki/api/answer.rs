//! Loki's JSON shapes: `{"status": "success", "data": {"resultType": …, "result": …, "stats":
//! …}}` with streams (`[["<ns>", "line"], …]`), matrices (`[[<seconds>, "<value>"], …]`),
//! vectors and scalars, numbers written as Go writes them (`"0.5"`, `"NaN"`, `"+Inf"`).
//!
//! An answer is written into its [`Answer`] a series or a stream at a time, never built as a JSON
//! tree first; each series is given back to the read's charge once it is written, so that the
//! points and their text are not both held whole.

use serde::{Serialize, Serializer};
use serde_json::{json, Value as Json};

use super::charged::Answer;
use crate::error::QueryError;
use crate::loki::detected::{DetectedField, DetectedLabel};
use crate::loki::logql::eval::{self, Series, Steps, Value};
use crate::loki::logql::labels::Labels;
use crate::loki::read::{Entry, Stats, Streams};

/// `{"status": "success", "data": data}`, for the answers that are small and made whole (labels,
/// series).
pub(crate) fn success(data: Json, answer: &mut Answer) -> Result<(), QueryError> {
    answer.json(true, &json!({"status": "success", "data": data}))
}

/// A number as Loki writes a sample's value.
pub(crate) fn sample_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        value.to_string()
    }
}

/// Seconds since the epoch of `nanos`, as a JSON number: whole when it is.
pub(crate) fn seconds(nanos: i64) -> Json {
    if nanos % 1_000_000_000 == 0 {
        json!(nanos / 1_000_000_000)
    } else {
        json!(nanos as f64 / 1e9)
    }
}

/// The `stats` object, in the part of Loki's shape that clients read: its `summary`.
pub(crate) fn stats(stats: &Stats) -> Json {
    let per_second = |amount: u64| {
        if stats.seconds > 0.0 {
            (amount as f64 / stats.seconds) as u64
        } else {
            0
        }
    };
    json!({
        "summary": {
            "bytesProcessedPerSecond": per_second(stats.bytes_scanned),
            "linesProcessedPerSecond": per_second(stats.lines_scanned),
            "totalBytesProcessed": stats.bytes_scanned,
            "totalLinesProcessed": stats.lines_scanned,
            "totalEntriesReturned": stats.returned,
            "execTime": stats.seconds,
            "queueTime": 0,
            "subqueries": 0,
            "totalPostFilterLines": stats.returned,
        },
        "volume": {"rollupRowsRead": stats.volume_rows},
    })
}

/// Writes `{"status":"success","data":{"resultType":<kind>,"result":[` then `each` item of the
/// result, then `],"stats":…}}`.
fn result_list(
    answer: &mut Answer,
    head: &'static str,
    stats: &Stats,
    each: impl FnOnce(&mut Answer) -> Result<(), QueryError>,
) -> Result<(), QueryError> {
    answer.text(head);
    each(answer)?;
    answer.text(r#"],"stats":"#);
    answer.json(true, &self::stats(stats))?;
    answer.text("}}");
    Ok(())
}

const STREAMS_HEAD: &str = r#"{"status":"success","data":{"resultType":"streams","result":["#;
const MATRIX_HEAD: &str = r#"{"status":"success","data":{"resultType":"matrix","result":["#;
const VECTOR_HEAD: &str = r#"{"status":"success","data":{"resultType":"vector","result":["#;

/// A log query's answer.
pub(crate) fn streams(
    streams: Streams,
    stats: &Stats,
    answer: &mut Answer,
) -> Result<(), QueryError> {
    result_list(answer, STREAMS_HEAD, stats, |answer| {
        for (n, (labels, entries)) in streams.streams.iter().enumerate() {
            answer.json(n == 0, &StreamJson::new(labels, entries))?;
        }
        Ok(())
    })
}

/// One message of a live tail: the lines of each stream, oldest first.
pub(crate) fn tail(streams: Streams) -> Json {
    let list: Vec<StreamJson> = streams
        .streams
        .iter()
        .map(|(labels, entries)| StreamJson::new(labels, entries))
        .collect();
    json!({ "streams": list })
}

/// A stream as Loki lists it: `{"stream": labels, "values": [["<ns>", "line"], …]}`.
#[derive(Serialize)]
struct StreamJson<'a> {
    stream: &'a Labels,
    values: EntriesJson<'a>,
}

impl<'a> StreamJson<'a> {
    fn new(labels: &'a Labels, entries: &'a [Entry]) -> Self {
        StreamJson {
            stream: labels,
            values: EntriesJson(entries),
        }
    }
}

struct EntriesJson<'a>(&'a [Entry]);

impl Serialize for EntriesJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(
            self.0
                .iter()
                .map(|entry| (entry.ts.to_string(), &entry.line)),
        )
    }
}

/// A series of a matrix: `{"metric": labels, "values": [[<seconds>, "<value>"], …]}`, the steps
/// without a point left out.
#[derive(Serialize)]
struct MatrixSeries<'a> {
    metric: &'a Labels,
    values: PointsJson<'a>,
}

struct PointsJson<'a> {
    points: &'a [Option<f64>],
    steps: Steps,
}

impl Serialize for PointsJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.points.iter().enumerate().filter_map(|(at, point)| {
            point.map(|value| (seconds(self.steps.at(at)), sample_value(value)))
        }))
    }
}

/// A range query's metric answer: a matrix (a number alone becomes one series without labels).
/// Each series is given back to the read's charge once written.
pub(crate) fn matrix(
    value: Value,
    steps: Steps,
    stats: &Stats,
    answer: &mut Answer,
) -> Result<(), QueryError> {
    let series = match value {
        Value::Matrix(series) => series,
        Value::Scalar(number) => {
            let labels = Labels::new();
            answer
                .charge()
                .charge(eval::series_bytes(&labels, steps.count))?;
            vec![Series {
                labels,
                points: vec![Some(number); steps.count],
            }]
        }
    };
    result_list(answer, MATRIX_HEAD, stats, |answer| {
        for (n, one) in series.into_iter().enumerate() {
            let written = MatrixSeries {
                metric: &one.labels,
                values: PointsJson {
                    points: &one.points,
                    steps,
                },
            };
            answer.json(n == 0, &written)?;
            answer.charge().release(one.bytes());
        }
        Ok(())
    })
}

/// A sample of a vector: `{"metric": labels, "value": [<seconds>, "<value>"]}`.
#[derive(Serialize)]
struct Sample<'a> {
    metric: &'a Labels,
    value: (Json, String),
}

/// An instant query's metric answer at `time` (nanoseconds): a vector, or a scalar.
pub(crate) fn instant(
    value: Value,
    time: i64,
    stats: &Stats,
    answer: &mut Answer,
) -> Result<(), QueryError> {
    match value {
        Value::Scalar(number) => answer.json(
            true,
            &json!({
                "status": "success",
                "data": {
                    "resultType": "scalar",
                    "result": [seconds(time), sample_value(number)],
                    "stats": self::stats(stats),
                },
            }),
        ),
        Value::Matrix(series) => volume(series, time, stats, answer),
    }
}

/// Each series' single point as a vector sample at `time` (nanoseconds), given back to the
/// read's charge once written: an instant query's vector, and `/index/volume`'s answer.
pub(crate) fn volume(
    series: Vec<Series>,
    time: i64,
    stats: &Stats,
    answer: &mut Answer,
) -> Result<(), QueryError> {
    result_list(answer, VECTOR_HEAD, stats, |answer| {
        let mut first = true;
        for one in series {
            if let Some(value) = one.points.first().copied().flatten() {
                let sample = Sample {
                    metric: &one.labels,
                    value: (seconds(time), sample_value(value)),
                };
                answer.json(first, &sample)?;
                first = false;
            }
            answer.charge().release(one.bytes());
        }
        Ok(())
    })
}

/// `detected_labels`' answer: `{"detectedLabels": [{"label", "cardinality"}, …]}`, or `{}` when
/// there are none, as Loki leaves an empty list out.
pub(crate) fn detected_labels(
    labels: &[DetectedLabel],
    answer: &mut Answer,
) -> Result<(), QueryError> {
    match labels {
        [] => answer.json(true, &json!({})),
        _ => answer.json(true, &json!({ "detectedLabels": labels })),
    }
}

/// `detected_fields`' answer: `{"fields": [{"label", "type", "cardinality", "parsers",
/// "jsonPath"}, …], "limit": limit}`, or `{}` when there are none.
pub(crate) fn detected_fields(
    fields: &[DetectedField],
    limit: usize,
    answer: &mut Answer,
) -> Result<(), QueryError> {
    match fields {
        [] => answer.json(true, &json!({})),
        _ => answer.json(true, &json!({ "fields": fields, "limit": limit })),
    }
}

/// A detected field's values: `{"limit": limit, "values": […]}`, or `{}` when there are none.
pub(crate) fn detected_values(
    values: &[String],
    limit: usize,
    answer: &mut Answer,
) -> Result<(), QueryError> {
    match values {
        [] => answer.json(true, &json!({})),
        _ => answer.json(true, &json!({ "limit": limit, "values": values })),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::loki::read::Entry;
    use crate::observability::metrics::Registry;
    use crate::query::memory::{MemoryLimits, ReadMemory};
    use crate::query::metrics::QueryMetrics;

    fn memory(per_read: usize) -> Arc<ReadMemory> {
        let metrics = QueryMetrics::register(&Registry::new());
        Arc::new(ReadMemory::new(
            MemoryLimits {
                per_read,
                all_reads: per_read,
            },
            &metrics,
        ))
    }

    /// What `write` writes, as JSON.
    fn written(write: impl FnOnce(&mut Answer) -> Result<(), QueryError>) -> Json {
        let mut answer = Answer::new(memory(1 << 20).read(&Arc::from("t")));
        write(&mut answer).unwrap();
        serde_json::from_slice(&answer.to_vec()).unwrap()
    }

    #[test]
    fn shapes_are_lokis() {
        assert_eq!(sample_value(2.0), "2");
        assert_eq!(sample_value(0.05), "0.05");
        assert_eq!(sample_value(f64::NAN), "NaN");
        assert_eq!(sample_value(f64::INFINITY), "+Inf");
        assert_eq!(seconds(1_700_000_000_000_000_000), json!(1_700_000_000));
        assert_eq!(seconds(1_700_000_000_500_000_000), json!(1_700_000_000.5));

        let mut lines = Streams::default();
        let labels = Labels::from([("service_name".to_owned(), "api".to_owned())]);
        lines.streams.insert(
            labels,
            vec![Entry {
                ts: 1_700_000_000_000_000_001,
                line: "hello".into(),
            }],
        );
        let body = written(|answer| streams(lines.clone(), &Stats::default(), answer));
        assert_eq!(body["status"], "success");
        assert_eq!(body["data"]["resultType"], "streams");
        assert_eq!(
            body["data"]["result"][0],
            json!({"stream": {"service_name": "api"}, "values": [["1700000000000000001", "hello"]]})
        );
        assert!(body["data"]["stats"]["summary"]["execTime"].is_number());
        assert_eq!(tail(lines)["streams"], body["data"]["result"]);

        let steps = Steps::new(60_000_000_000, 120_000_000_000, 60_000_000_000).unwrap();
        let body = written(|answer| matrix(eval::vector(1.0, 2), steps, &Stats::default(), answer));
        assert_eq!(
            body["data"]["result"][0],
            json!({"metric": {}, "values": [[60, "1"], [120, "1"]]})
        );
        let body = written(|answer| {
            instant(
                eval::vector(2.0, 1),
                60_000_000_000,
                &Stats::default(),
                answer,
            )
        });
        assert_eq!(body["data"]["resultType"], "vector");
        assert_eq!(body["data"]["result"][0]["value"], json!([60, "2"]));
        let body = written(|answer| {
            instant(
                Value::Scalar(0.5),
                60_000_000_000,
                &Stats::default(),
                answer,
            )
        });
        assert_eq!(body["data"]["result"], json!([60, "0.5"]));
    }

    /// 100 series of 1,000 steps whose text (36 bytes a point) is larger than their points (16):
    /// each is given back to the charge once written, so the charge ends as the text alone; under
    /// a bound smaller than the text, the writing stops part-way.
    #[test]
    fn a_matrix_gives_back_each_series_as_it_is_written_and_stops_at_the_bound() {
        let start = 1_700_000_000_500_000_000;
        let steps = Steps::new(start, start + 999_000_000_000, 1_000_000_000).unwrap();
        let series = |n: usize| Series {
            labels: Labels::from([("n".to_owned(), n.to_string())]),
            points: vec![Some(1.0 / 3.0); steps.count],
        };
        let value = Value::Matrix((0..100).map(series).collect());
        let points = value.bytes();
        let large = memory(8 << 20);
        let mut answer = Answer::new(large.read(&Arc::from("t")));
        answer.charge().charge(points).unwrap();
        matrix(value, steps, &Stats::default(), &mut answer).unwrap();
        let text = answer.to_vec();
        assert!(text.len() > 100 * 1000 * 36, "{} bytes", text.len());
        let held = answer.charge().held();
        // All but the fixed frame around the result, which takes no memory of its own.
        assert!(
            held <= text.len() && text.len() - held < 256,
            "the text alone is held: {held} bytes for {} of text",
            text.len()
        );
        let body = answer.into_body();
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(text.len() as u64)
        );
        assert_eq!(large.held(), held, "the body holds the charge");
        drop(body);
        assert_eq!(large.held(), 0);

        let small = memory(points + 64 * 1024);
        let mut answer = Answer::new(small.read(&Arc::from("t")));
        answer.charge().charge(points).unwrap();
        let value = Value::Matrix((0..100).map(series).collect());
        let err = matrix(value, steps, &Stats::default(), &mut answer).unwrap_err();
        assert!(matches!(err, QueryError::ReadTooLarge { .. }), "{err}");
        assert!(answer.to_vec().len() < 2 * 64 * 1024, "stopped part-way");
    }
}
