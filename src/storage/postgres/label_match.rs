//! How a stream selector's label conditions are tested in SQL, on the `labels` column of `logs`
//! and of the stream catalog alike: both hold a stream's label set as `jsonb`.

use sqlx::{Postgres, QueryBuilder};

use crate::model::selection::{Pattern, PlainTest, Selection};

/// The conditions of `selection` on the `labels` column, of `logs` or of the stream catalog.
pub(super) fn push_label_conditions(
    builder: &mut QueryBuilder<'_, Postgres>,
    selection: &Selection,
) {
    // As containment, which a past hour's GIN of stream labels answers; the same test as
    // `labels ->> key = value`, a label's value being always a string. The object is bound whole:
    // `jsonb_build_object` is not folded into a constant, and building it for every row scanned
    // tripled the filter's time.
    for (key, value) in &selection.labels {
        builder
            .push(" AND labels @> ")
            .push_bind(serde_json::json!({ key: value }).to_string())
            .push("::jsonb");
    }
    for (key, pattern) in &selection.label_patterns {
        push_label_regex(builder, key, pattern);
    }
}

/// ` AND (labels ->> key) = ANY(literals)` for literal alternatives, `<> ''` for `.+`, else
/// ` AND (labels ->> key) ~ pattern` (or `~*`) when PostgreSQL reads the pattern as the engine
/// does: a stream without the label has NULL there, which no pattern matches, as none of a
/// selection's label patterns matches the empty value. Without it a selector of label patterns
/// alone would send every row of the tenant's range to the engine.
fn push_label_regex(builder: &mut QueryBuilder<'_, Postgres>, key: &str, pattern: &Pattern) {
    let value = |builder: &mut QueryBuilder<'_, Postgres>| {
        builder
            .push("(labels ->> ")
            .push_bind(key.to_owned())
            .push("::text)");
    };
    if let Some(test) = pattern.plain_test(false) {
        push_plain_test(builder, test, value);
        return;
    }
    let Some(pg) = &pattern.postgres else { return };
    builder.push(" AND ");
    value(builder);
    builder
        .push(if pg.case_insensitive { " ~* " } else { " ~ " })
        .push_bind(pg.expression.clone());
}

/// ` AND value = ANY(…)`, `<> ALL(…)` or `<> ''` for `test` (nothing for every value), where
/// `value` pushes the value's expression.
pub(super) fn push_plain_test(
    builder: &mut QueryBuilder<'_, Postgres>,
    test: PlainTest<'_>,
    value: impl FnOnce(&mut QueryBuilder<'_, Postgres>),
) {
    let (operator, values) = match test {
        PlainTest::Everything => return,
        PlainTest::OneOf(values) => (" = ANY(", Some(values)),
        PlainTest::NoneOf(values) => (" <> ALL(", Some(values)),
        PlainTest::NotEmpty => (" <> ''", None),
    };
    builder.push(" AND ");
    value(builder);
    builder.push(operator);
    if let Some(values) = values {
        builder.push_bind(values.to_vec()).push(")");
    }
}
