//! A SQLite statement built as text with its values kept apart, so that the same statement can
//! run through the driver or be stepped on the connection's own handle (`batched_rows.rs`).

use sqlx::sqlite::SqliteArguments;
use sqlx::{Arguments, Sqlite};

/// A value bound to one `?` of a statement.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Bind {
    /// An integer.
    Int(i64),
    /// A text.
    Text(String),
}

impl From<i64> for Bind {
    fn from(value: i64) -> Self {
        Bind::Int(value)
    }
}

impl From<String> for Bind {
    fn from(value: String) -> Self {
        Bind::Text(value)
    }
}

impl From<&str> for Bind {
    fn from(value: &str) -> Self {
        Bind::Text(value.to_owned())
    }
}

/// SQL text with a `?` for each of its values, in order.
#[derive(Clone, Debug, Default)]
pub(super) struct Statement {
    /// The text.
    pub(super) sql: String,
    /// The values of its `?`s, in order.
    pub(super) binds: Vec<Bind>,
}

impl Statement {
    /// A statement that starts with `sql`.
    pub(super) fn new(sql: &str) -> Self {
        Statement {
            sql: sql.to_owned(),
            binds: Vec::new(),
        }
    }

    /// Appends SQL text.
    pub(super) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Appends a `?` bound to `value`.
    pub(super) fn push_bind(&mut self, value: impl Into<Bind>) -> &mut Self {
        self.sql.push('?');
        self.binds.push(value.into());
        self
    }

    /// Appends `(?, ?, …)`, a list for `IN`, bound to `values`.
    pub(super) fn push_list(&mut self, values: &[String]) -> &mut Self {
        self.sql.push('(');
        for (index, value) in values.iter().enumerate() {
            if index > 0 {
                self.sql.push_str(", ");
            }
            self.push_bind(value.as_str());
        }
        self.sql.push(')');
        self
    }

    /// The statement as the driver runs it.
    pub(super) fn query(&self) -> sqlx::query::Query<'_, Sqlite, SqliteArguments<'_>> {
        let mut arguments = SqliteArguments::default();
        for bind in &self.binds {
            // Adding an integer or a text to SQLite's arguments cannot fail: they are only
            // encoded when the statement runs.
            let _ = match bind {
                Bind::Int(value) => arguments.add(*value),
                Bind::Text(value) => arguments.add(value.as_str()),
            };
        }
        sqlx::query_with(&self.sql, arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_gets_a_placeholder_in_order() {
        let mut statement = Statement::new("SELECT 1 WHERE a = ");
        statement
            .push_bind(7)
            .push(" AND b = ")
            .push_bind("x")
            .push(" AND c = ")
            .push_bind(String::from("y"));
        assert_eq!(statement.sql, "SELECT 1 WHERE a = ? AND b = ? AND c = ?");
        assert_eq!(
            statement.binds,
            [Bind::Int(7), Bind::from("x"), Bind::Text("y".into())]
        );
    }

    #[tokio::test]
    async fn the_driver_binds_the_values_in_order() {
        use sqlx::{Connection, Row};
        let mut conn = sqlx::SqliteConnection::connect("sqlite::memory:")
            .await
            .unwrap();
        let mut statement = Statement::new("SELECT ");
        statement.push_bind(41).push(" + 1, ").push_bind("text");
        let row = statement.query().fetch_one(&mut conn).await.unwrap();
        assert_eq!(row.get::<i64, _>(0), 42);
        assert_eq!(row.get::<String, _>(1), "text");
    }
}
