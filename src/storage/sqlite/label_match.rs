//! How a stream selector's `=` matchers are tested in SQL, on the `labels` column of `logs` and of
//! the stream catalog alike: both hold a label set as the service writes it.

use super::statement::Statement;
use crate::model::selection::PlainTest;

/// ` AND …` for each label of `labels` the `labels` column (of `logs` or `streams`) must hold with
/// its value. A label name in a selector is an identifier (the LogQL lexer's), so it needs no
/// escaping in a JSON path. A substring test first passes over most other rows without reading
/// their JSON; the lookup then confirms what it found.
pub(super) fn push_label_matches(builder: &mut Statement, labels: &[(String, String)]) {
    for (key, value) in labels {
        builder
            .push(" AND instr(labels, ")
            .push_bind(label_text(key, value))
            .push(") > 0");
        builder
            .push(" AND json_extract(labels, ")
            .push_bind(format!("$.\"{key}\""))
            .push(") = ")
            .push_bind(value.as_str());
    }
}

/// ` AND value IN (…)`, `NOT IN (…)` or `<> ''` for `test` (nothing for every value), where
/// `value` pushes the value's expression.
pub(super) fn push_plain_test(
    builder: &mut Statement,
    test: PlainTest<'_>,
    value: impl FnOnce(&mut Statement),
) {
    let (operator, values) = match test {
        PlainTest::Everything => return,
        PlainTest::OneOf(values) => (" IN ", Some(values)),
        PlainTest::NoneOf(values) => (" NOT IN ", Some(values)),
        PlainTest::NotEmpty => (" <> ''", None),
    };
    builder.push(" AND ");
    value(builder);
    builder.push(operator);
    if let Some(values) = values {
        builder.push_list(values);
    }
}

/// How a stored label set writes the label `key` with `value`: the service writes every set
/// compactly with `serde_json` (`ingest::validate::StreamLabels`), so a set that has the label holds
/// this text.
fn label_text(key: &str, value: &str) -> String {
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    format!("{}:{}", quoted(key), quoted(value))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ingest::validate::StreamLabels;

    #[test]
    fn a_stored_label_set_holds_the_text_of_each_of_its_labels() {
        let labels: BTreeMap<String, String> = [
            ("job", "cron"),
            ("quote\"d", "a\"b\\c"),
            ("unicode", "é ☃ \u{7f}"),
            ("control", "line\nbreak\ttab\u{1}"),
            ("empty", ""),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
        let stored = StreamLabels::new(labels.clone()).json().to_owned();
        for (key, value) in &labels {
            assert!(
                stored.contains(&label_text(key, value)),
                "{key} in {stored}"
            );
        }
        assert!(!stored.contains(&label_text("job", "cro")));
    }
}
