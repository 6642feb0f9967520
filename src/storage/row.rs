//! What a write is made of: rows, and the chunk keys claimed with them so a retried chunk is
//! stored once.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use crate::record::Record;

/// One row of a batch: a record and the tenant that sent it.
#[derive(Clone, Copy, Debug)]
pub struct Row<'a> {
    /// Tenant that owns the record.
    pub tenant: &'a str,
    /// The record itself.
    pub record: &'a Record,
}

/// The runs of `rows` that belong to one stream (tenant, service and label set), in order. A
/// stream's records come one after another and share their labels' allocation, so a store that
/// keeps something per stream looks it up once a run, not once a record.
pub(in crate::storage) fn stream_runs<'r, 'a>(
    rows: &'r [Row<'a>],
) -> impl Iterator<Item = &'r [Row<'a>]> {
    rows.chunk_by(|a, b| {
        Arc::ptr_eq(&a.record.labels, &b.record.labels)
            && a.tenant == b.tenant
            && a.record.service == b.record.service
    })
}

/// Names a chunk for deduplication: stored at most once per tenant, producer and sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkKey<'a> {
    /// Tenant that sent the chunk.
    pub tenant: &'a str,
    /// The producer's id, 1 to 64 bytes.
    pub producer_id: &'a [u8],
    /// The chunk's number within its producer.
    pub sequence: u64,
}

/// A chunk key to claim together with the rows it covers (positions in the rows written with it).
#[derive(Clone, Debug)]
pub struct Claim<'a> {
    /// The key.
    pub key: ChunkKey<'a>,
    /// The chunk's rows; written only if the key is claimed now.
    pub rows: Range<usize>,
}

/// Which claims succeeded, in claim order, given the keys the database reported as newly
/// inserted. Two claims of one key in the same write: the first wins, the second is a duplicate.
pub(in crate::storage) fn claimed_in_order<'a>(
    claims: &[Claim<'a>],
    inserted: impl IntoIterator<Item = (String, Vec<u8>, i64)>,
) -> Vec<bool> {
    let mut fresh: HashMap<(String, Vec<u8>, i64), usize> = HashMap::new();
    for key in inserted {
        *fresh.entry(key).or_default() += 1;
    }
    claims
        .iter()
        .map(|claim| {
            let key = (
                claim.key.tenant.to_owned(),
                claim.key.producer_id.to_vec(),
                claim.key.sequence as i64,
            );
            match fresh.get_mut(&key) {
                Some(left) if *left > 0 => {
                    *left -= 1;
                    true
                }
                _ => false,
            }
        })
        .collect()
}

/// The rows to write: all but those of claims that failed.
pub(in crate::storage) fn kept_rows<'a>(
    rows: &[Row<'a>],
    claims: &[Claim<'_>],
    claimed: &[bool],
) -> Vec<Row<'a>> {
    let mut skip = vec![false; rows.len()];
    for (claim, won) in claims.iter().zip(claimed) {
        if !won {
            skip[claim.rows.clone()].fill(true);
        }
    }
    rows.iter()
        .zip(skip)
        .filter(|(_, skip)| !skip)
        .map(|(row, _)| *row)
        .collect()
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    fn claim(tenant: &'static str, sequence: u64, rows: Range<usize>) -> Claim<'static> {
        Claim {
            key: ChunkKey {
                tenant,
                producer_id: b"p",
                sequence,
            },
            rows,
        }
    }

    #[test]
    fn the_first_claim_of_a_key_wins_and_the_others_are_duplicates() {
        let claims = [
            claim("a", 1, 0..2),
            claim("a", 2, 2..3),
            claim("a", 1, 3..5),
        ];
        let inserted = [("a".to_owned(), b"p".to_vec(), 1)];
        assert_eq!(
            claimed_in_order(&claims, inserted),
            vec![true, false, false]
        );
    }

    #[test]
    fn rows_of_lost_claims_are_left_out() {
        let record = Record {
            ts: Utc::now(),
            severity: 9,
            service: "s".into(),
            message: "m".into(),
            labels: "{}".into(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        };
        let rows: Vec<Row<'_>> = (0..5)
            .map(|_| Row {
                tenant: "a",
                record: &record,
            })
            .collect();
        let claims = [claim("a", 1, 0..2), claim("a", 2, 3..5)];
        assert_eq!(kept_rows(&rows, &claims, &[false, true]).len(), 3);
        assert_eq!(kept_rows(&rows, &claims, &[true, true]).len(), 5);
    }

    #[test]
    fn a_run_is_one_tenants_records_of_one_service_and_label_set() {
        let labels: Arc<str> = r#"{"job":"cron"}"#.into();
        let record = |service: &str, labels: &Arc<str>| Record {
            ts: Utc::now(),
            severity: 9,
            service: service.into(),
            message: "m".into(),
            labels: labels.clone(),
            attributes: "{}".into(),
            trace_id: None,
            span_id: None,
        };
        let same = record("cron", &labels);
        let other_service = record("batch", &labels);
        let other_labels = record("cron", &r#"{"job":"nightly"}"#.into());
        let rows = [
            Row {
                tenant: "a",
                record: &same,
            },
            Row {
                tenant: "a",
                record: &same,
            },
            Row {
                tenant: "b",
                record: &same,
            },
            Row {
                tenant: "b",
                record: &other_service,
            },
            Row {
                tenant: "b",
                record: &other_labels,
            },
            Row {
                tenant: "b",
                record: &other_labels,
            },
        ];
        let lengths: Vec<usize> = stream_runs(&rows).map(<[Row]>::len).collect();
        assert_eq!(lengths, [2, 1, 1, 2]);
    }
}
