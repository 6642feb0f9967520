//! What can go wrong talking to the database, and how a sqlx error is sorted into it.

/// What can go wrong talking to the database.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused the data itself: a constraint, a value it cannot hold, an error a
    /// trigger raised for it; any error it raised that is not about itself (its connection,
    /// resources, transactions or schema). Retrying the same rows cannot help, so the batch is
    /// split to find the culprit.
    #[error("the database refused the row: {0}")]
    RowRejected(String),
    /// The database is unreachable, overloaded or failing; the same write may succeed later.
    #[error("{0}")]
    Unavailable(String),
    /// The URL names no supported database or is malformed.
    #[error("invalid database url: {0}")]
    Url(String),
    /// A migration could not be applied.
    #[error("migration failed: {0}")]
    Migrate(String),
}

impl StoreError {
    /// The cause in a few words a client may see: what kind of failure, never the database's own
    /// text (host names, SQL), which is logged instead.
    pub fn public_cause(&self) -> &'static str {
        let detail = match self {
            StoreError::RowRejected(_) => return "the database refused a row",
            StoreError::Url(_) => return "the database URL is invalid",
            StoreError::Migrate(_) => return "a migration failed",
            StoreError::Unavailable(detail) => detail.to_ascii_lowercase(),
        };
        let says = |words: &[&str]| words.iter().any(|word| detail.contains(word));
        if says(&["disk is full", "no space left", "could not extend", "53100"]) {
            "the disk is full"
        } else if says(&["readonly", "read-only", "read only"]) {
            "the database is read-only"
        } else if says(&["pool timed out", "timed out", "timeout"]) {
            "the database did not answer in time"
        } else if says(&[
            "refused",
            "reset",
            "broken pipe",
            "communicating",
            "terminat",
            "closed",
        ]) {
            "the connection to the database failed"
        } else {
            "the database failed"
        }
    }

    /// A stable label value for the insert-errors metric.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::RowRejected(_) => "row_rejected",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Url(_) => "url",
            StoreError::Migrate(_) => "migrate",
        }
    }
}

/// Maps a sqlx error to retryable or row-level. An error the database raised, with its code and
/// message, is the rows' unless the backend's `blames_the_store` says it is about the database
/// itself; an error without a code (I/O, a pool timeout, the protocol) is always retried. So an
/// error no one foresaw, such as one a trigger raises, costs a split batch rather than an outage.
pub(in crate::storage) fn classify(
    err: sqlx::Error,
    blames_the_store: impl Fn(&str, &str) -> bool,
) -> StoreError {
    match &err {
        sqlx::Error::Database(db)
            if db
                .code()
                .is_some_and(|code| !blames_the_store(&code, db.message())) =>
        {
            StoreError::RowRejected(db.message().to_owned())
        }
        _ => StoreError::Unavailable(err.to_string()),
    }
}

/// A sqlx error as one the same call may get past later.
pub(in crate::storage) fn unavailable(err: sqlx::Error) -> StoreError {
    StoreError::Unavailable(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_cause_names_the_kind_of_failure_and_nothing_else() {
        let unavailable = |detail: &str| StoreError::Unavailable(detail.into()).public_cause();
        assert_eq!(
            unavailable("error returned from database: (code: 13) database or disk is full"),
            "the disk is full"
        );
        assert_eq!(
            unavailable("error communicating with database: Connection refused (os error 111)"),
            "the connection to the database failed"
        );
        assert_eq!(
            unavailable("pool timed out while waiting for an open connection"),
            "the database did not answer in time"
        );
        assert_eq!(
            unavailable("db-7.internal: INSERT INTO logs"),
            "the database failed"
        );
    }
}
