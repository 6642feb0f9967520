//! The endpoints behind Grafana's label and field pickers in Explore and Logs Drilldown:
//! `detected_labels`, `detected_fields` and `detected_field/NAME/values`, read by
//! [`crate::loki::detected`].

use axum::body::Body;
use axum::extract::Path;
use axum::http::Response;
use chrono::Utc;

use super::params::Params;
use super::{answer, query_text, selector, Call};
use crate::error::HttpError;
use crate::loki::detected::{FieldsAsk, DEFAULT_LIMIT};
use crate::loki::logql::ast::{LogQuery, Query};

/// `detected_labels`: `query` (a selector; all streams when not given), `start`, `end`.
pub(super) async fn labels(call: Call) -> Response<Body> {
    call.answer(
        "detected_labels",
        |reads, tenant, params, mut answer| async move {
            let range = params.range(Utc::now())?;
            let query = match params.get("query") {
                Some(text) => selector(text)?,
                None => LogQuery::default(),
            };
            // Loki refuses a pipeline here, in these words.
            if !query.pipeline.is_empty() {
                return Err(HttpError::BadRequest(
                    "only label matchers are supported".into(),
                ));
            }
            let labels = reads
                .loki_detected_labels(&tenant, &query, range, answer.charge())
                .await?;
            answer::detected_labels(&labels, &mut answer)?;
            Ok(answer)
        },
    )
    .await
}

/// What a fields or values request asks: its log query, and `line_limit` and `limit` (or
/// `field_limit`), each 1000 when not given.
fn fields_ask(params: &Params) -> Result<(LogQuery, FieldsAsk), HttpError> {
    // Loki refuses a metric query here, in these words.
    let Query::Log(query) = crate::loki::logql::parse(query_text(params)?)? else {
        return Err(HttpError::BadRequest(
            "only log selector is supported".into(),
        ));
    };
    let ask = FieldsAsk {
        lines: params.entries("line_limit", DEFAULT_LIMIT)?,
        limit: params.count(&["limit", "field_limit"], DEFAULT_LIMIT)?,
    };
    Ok((query, ask))
}

/// `detected_fields`: `query` (a log query, stages allowed), `start`, `end`, `line_limit`,
/// `limit`.
pub(super) async fn fields(call: Call) -> Response<Body> {
    call.answer(
        "detected_fields",
        |reads, tenant, params, mut answer| async move {
            let range = params.range(Utc::now())?;
            let (query, ask) = fields_ask(&params)?;
            let fields = reads
                .loki_detected_fields(&tenant, &query, range, ask, answer.charge())
                .await?;
            answer::detected_fields(&fields, ask.limit, &mut answer)?;
            Ok(answer)
        },
    )
    .await
}

/// `detected_field/NAME/values`: the parameters of `detected_fields`, `limit` counting values.
pub(super) async fn values(Path(name): Path<String>, call: Call) -> Response<Body> {
    call.answer(
        "detected_field_values",
        |reads, tenant, params, mut answer| async move {
            let range = params.range(Utc::now())?;
            let (query, ask) = fields_ask(&params)?;
            let values = reads
                .loki_detected_field_values(&tenant, &query, range, &name, ask, answer.charge())
                .await?;
            answer::detected_values(&values, ask.limit, &mut answer)?;
            Ok(answer)
        },
    )
    .await
}
