//! Loki's JSON shapes: `{"status": "success", "data": {"resultType": …, "result": …, "stats":
//! …}}` with streams (`[["<ns>", "line"], …]`), matrices (`[[<seconds>, "<value>"], …]`),
//! vectors and scalars, numbers written as Go writes them (`"0.5"`, `"NaN"`, `"+Inf"`).

use serde_json::{json, Value as Json};

use crate::logql::eval::{Series, Steps, Value};
use crate::logql::labels::Labels;
use crate::query::loki::{Stats, Streams};

/// `{"status": "success", "data": data}`.
pub fn success(data: Json) -> Json {
    json!({"status": "success", "data": data})
}

/// A number as Loki writes a sample's value.
pub fn sample_value(value: f64) -> String {
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
pub fn seconds(nanos: i64) -> Json {
    if nanos % 1_000_000_000 == 0 {
        json!(nanos / 1_000_000_000)
    } else {
        json!(nanos as f64 / 1e9)
    }
}

/// The `stats` object, in the part of Loki's shape that clients read: its `summary`.
pub fn stats(stats: &Stats) -> Json {
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

/// A log query's answer.
pub fn streams(streams: Streams, stats: &Stats) -> Json {
    success(json!({
        "resultType": "streams",
        "result": stream_list(streams),
        "stats": self::stats(stats),
    }))
}

/// One message of a live tail: the lines of each stream, oldest first.
pub fn tail(streams: Streams) -> Json {
    json!({"streams": stream_list(streams)})
}

/// Streams as Loki lists them: `[{"stream": labels, "values": [["<ns>", "line"], …]}, …]`.
fn stream_list(streams: Streams) -> Json {
    streams
        .streams
        .into_iter()
        .map(|(labels, entries)| {
            let values: Vec<Json> = entries
                .into_iter()
                .map(|entry| json!([entry.ts.to_string(), entry.line]))
                .collect();
            json!({"stream": labels, "values": values})
        })
        .collect()
}

fn matrix_series(series: &Series, steps: Steps) -> Json {
    let values: Vec<Json> = series
        .points
        .iter()
        .enumerate()
        .filter_map(|(at, point)| point.map(|v| json!([seconds(steps.at(at)), sample_value(v)])))
        .collect();
    json!({"metric": series.labels, "values": values})
}

/// A range query's metric answer: a matrix (a number alone becomes one series without labels).
pub fn matrix(value: Value, steps: Steps, stats: &Stats) -> Json {
    let series = match value {
        Value::Matrix(series) => series,
        Value::Scalar(number) => vec![Series {
            labels: Labels::new(),
            points: vec![Some(number); steps.count],
        }],
    };
    let result: Vec<Json> = series.iter().map(|s| matrix_series(s, steps)).collect();
    success(json!({
        "resultType": "matrix",
        "result": result,
        "stats": self::stats(stats),
    }))
}

/// An instant query's metric answer at `time` (nanoseconds): a vector, or a scalar.
pub fn instant(value: Value, time: i64, stats: &Stats) -> Json {
    match value {
        Value::Scalar(number) => success(json!({
            "resultType": "scalar",
            "result": [seconds(time), sample_value(number)],
            "stats": self::stats(stats),
        })),
        Value::Matrix(series) => success(json!({
            "resultType": "vector",
            "result": vector_result(&series, time),
            "stats": self::stats(stats),
        })),
    }
}

/// Each series' single point as a vector sample at `time`.
fn vector_result(series: &[Series], time: i64) -> Vec<Json> {
    series
        .iter()
        .filter_map(|s| {
            let value = s.points.first().copied().flatten()?;
            Some(json!({"metric": s.labels, "value": [seconds(time), sample_value(value)]}))
        })
        .collect()
}

/// `/index/volume`'s answer: a vector at `time`.
pub fn volume(series: &[Series], time: i64, stats: &Stats) -> Json {
    success(json!({
        "resultType": "vector",
        "result": vector_result(series, time),
        "stats": self::stats(stats),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::loki::Entry;

    #[test]
    fn shapes_are_lokis() {
        assert_eq!(sample_value(2.0), "2");
        assert_eq!(sample_value(0.05), "0.05");
        assert_eq!(sample_value(f64::NAN), "NaN");
        assert_eq!(sample_value(f64::INFINITY), "+Inf");
        assert_eq!(seconds(1_700_000_000_000_000_000), json!(1_700_000_000));
        assert_eq!(seconds(1_700_000_000_500_000_000), json!(1_700_000_000.5));

        let mut answer = Streams::default();
        let labels = Labels::from([("service_name".to_owned(), "api".to_owned())]);
        answer.streams.insert(
            labels,
            vec![Entry {
                ts: 1_700_000_000_000_000_001,
                line: "hello".into(),
            }],
        );
        let body = streams(answer, &Stats::default());
        assert_eq!(body["status"], "success");
        assert_eq!(body["data"]["resultType"], "streams");
        assert_eq!(
            body["data"]["result"][0],
            json!({"stream": {"service_name": "api"}, "values": [["1700000000000000001", "hello"]]})
        );
        assert!(body["data"]["stats"]["summary"]["execTime"].is_number());

        let steps = Steps::new(60_000_000_000, 120_000_000_000, 60_000_000_000).unwrap();
        let body = matrix(crate::logql::eval::vector(1.0, 2), steps, &Stats::default());
        assert_eq!(
            body["data"]["result"][0],
            json!({"metric": {}, "values": [[60, "1"], [120, "1"]]})
        );
        let body = instant(
            crate::logql::eval::vector(2.0, 1),
            60_000_000_000,
            &Stats::default(),
        );
        assert_eq!(body["data"]["resultType"], "vector");
        assert_eq!(body["data"]["result"][0]["value"], json!([60, "2"]));
    }
}
