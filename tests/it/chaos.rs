//! `loghaul chaos`, the load-and-faults soak, run briefly: shippers push while the server is
//! SIGKILLed, SIGTERMed and restarted and (PostgreSQL) its database backends are terminated; every
//! acknowledged record must be stored exactly once.

use std::process::Command;

use crate::common::process::BINARY;
use crate::common::TestDb;

async fn a_short_soak_ends_with_nothing_lost_or_duplicated(db: &TestDb) {
    let output = Command::new(BINARY)
        .args([
            "chaos",
            "--duration",
            "16s",
            "--fault-every",
            "3s",
            "--rate",
            "4000",
            "--producers",
            "3",
            "--json",
            "--database-url",
            &db.url,
        ])
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the soak is clean: {stdout}\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("a JSON line")).unwrap();
    let number = |field: &str| report[field].as_u64().unwrap();
    assert!(number("acknowledged") > 10_000, "{report}");
    assert_eq!(number("acknowledged"), number("pushed"), "{report}");
    assert_eq!(number("stored"), number("acknowledged"), "{report}");
    assert_eq!(number("duplicated"), 0, "{report}");
    assert_eq!(number("lost"), 0, "{report}");
    let faults: u64 = report["faults"]
        .as_object()
        .unwrap()
        .values()
        .map(|count| count.as_u64().unwrap())
        .sum();
    assert!(faults >= 4, "faults were injected: {report}");
    assert_eq!(db.count().await as u64, number("stored"));
}
on_both_backends!(soak, a_short_soak_ends_with_nothing_lost_or_duplicated);
