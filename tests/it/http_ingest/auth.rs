//! Who an HTTP request is from: the key in `x-api-key`, `Authorization: Bearer` or Basic (the key
//! as the password), refused with 401 when missing or wrong; Loki's `X-Scope-OrgID`, which may
//! only repeat the key's tenant (403 otherwise), and which names the tenant on a keyless server.

use base64::Engine;

use super::{otlp_request, post};
use super::{send_loki, send_otlp, status_json, status_protobuf, JSON, OTLP, PROTOBUF};
use crate::common::{config, Backend, TestDb, TestServer};
use prost::Message;

const KEYS: &str = "key-a=team-a,key-b=team-b";

/// gRPC's UNAUTHENTICATED and PERMISSION_DENIED, as google.rpc.Status carries them.
const UNAUTHENTICATED: i64 = 16;
const PERMISSION_DENIED: i32 = 7;

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

async fn keys_are_read_from_every_header_and_refused_when_missing_or_wrong(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let export = otlp_request("checkout", &["never stored"]).encode_to_vec();

    // No key, a wrong key, a Bearer with nothing, a Basic whose password is no key: 401.
    let bearer_wrong = "Bearer not-a-key".to_owned();
    let basic_wrong = basic("key-a", "not-a-key");
    let refusals: [&[(&str, &str)]; 4] = [
        &[],
        &[("x-api-key", "not-a-key")],
        &[("authorization", bearer_wrong.as_str())],
        &[("authorization", basic_wrong.as_str())],
    ];
    for headers in refusals {
        // OTLP/JSON: a google.rpc.Status in JSON.
        let mut with_json = vec![JSON];
        with_json.extend_from_slice(headers);
        let answer = post(addr, OTLP, &with_json, b"{}").await;
        assert_eq!(answer.status, 401, "{headers:?}: {}", answer.text());
        let status = status_json(&answer);
        assert_eq!(status["code"], UNAUTHENTICATED, "{headers:?}: {status}");
        assert!(
            status["message"].as_str().unwrap().contains("key"),
            "{status}"
        );
        // OTLP/protobuf: the same status, in protobuf.
        let mut with_protobuf = vec![PROTOBUF];
        with_protobuf.extend_from_slice(headers);
        let answer = post(addr, OTLP, &with_protobuf, &export).await;
        assert_eq!(answer.status, 401, "{headers:?}: {}", answer.text());
        assert_eq!(
            i64::from(status_protobuf(&answer).code),
            UNAUTHENTICATED,
            "{headers:?}"
        );
        // Loki: text.
        let answer = send_loki(addr, headers, r#"{job="x"}"#, &["never stored"]).await;
        assert_eq!(answer.status, 401, "{headers:?}: {}", answer.text());
        assert!(
            answer
                .header("content-type")
                .is_some_and(|value| value.starts_with("text/plain")),
            "{answer:?}"
        );
        assert!(!answer.text().is_empty(), "the refusal says why");
    }
    assert_eq!(db.count().await, 0, "nothing unauthenticated is stored");

    // Each place an exporter can put the key, on both protocols, stores under the key's tenant.
    let bearer = "Bearer key-a".to_owned();
    let basic_a = basic("promtail", "key-b");
    // Headers, what they show, the tenant the rows are stored under.
    type Accepted<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
    let accepted: [Accepted; 3] = [
        (&[("x-api-key", "key-a")], "x-api-key", "team-a"),
        (&[("authorization", bearer.as_str())], "bearer", "team-a"),
        (&[("authorization", basic_a.as_str())], "basic", "team-b"),
    ];
    for (headers, how, _) in accepted {
        let answer = send_otlp(addr, headers, &[&format!("otlp {how}")]).await;
        assert_eq!(answer.status, 200, "{how}: {}", answer.text());
        let answer = send_loki(addr, headers, r#"{job="x"}"#, &[&format!("loki {how}")]).await;
        assert_eq!(answer.status, 204, "{how}: {}", answer.text());
    }
    let rows = db.stored().await;
    assert_eq!(rows.len(), 6, "{rows:?}");
    for (_, how, tenant) in accepted {
        for protocol in ["otlp", "loki"] {
            let message = format!("{protocol} {how}");
            let row = rows.iter().find(|row| row.message == message).unwrap();
            assert_eq!(row.tenant, tenant, "{message}");
        }
    }
    server.stop().await;
}
on_both_backends!(
    http_keys,
    keys_are_read_from_every_header_and_refused_when_missing_or_wrong
);

/// With keys, `X-Scope-OrgID` may only repeat the key's tenant; on OTLP too, where it is read the
/// same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_id_naming_another_tenant_is_forbidden() {
    let db = TestDb::create(Backend::Sqlite, "http_org_keys")
        .await
        .unwrap();
    let mut settings = config(&db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let own = [("x-api-key", "key-a"), ("x-scope-orgid", "team-a")];
    let answer = send_loki(addr, &own, r#"{job="x"}"#, &["own org"]).await;
    assert_eq!(answer.status, 204, "{}", answer.text());

    let other = [("x-api-key", "key-a"), ("x-scope-orgid", "team-b")];
    let answer = send_loki(addr, &other, r#"{job="x"}"#, &["other org"]).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert!(answer.text().contains("X-Scope-OrgID"), "{}", answer.text());
    let answer = send_otlp(addr, &other, &["other org (otlp)"]).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert_eq!(status_protobuf(&answer).code, PERMISSION_DENIED);

    let rows = db.stored().await;
    let stored: Vec<(&str, &str)> = rows
        .iter()
        .map(|row| (row.message.as_str(), row.tenant.as_str()))
        .collect();
    assert_eq!(stored, [("own org", "team-a")]);
    server.stop().await;
}

/// Without keys, `X-Scope-OrgID` names no tenant but `default` (403 naming the option), unless
/// `--allow-org-id-tenants`: then it names the tenant, as in a single-binary Loki, and a name that
/// is not a tenant name is refused with 400; nothing refused is stored.
async fn a_keyless_server_takes_the_tenant_from_the_org_id(db: &TestDb) {
    let server = TestServer::start(config(db)).await;
    let addr = server.http_ingest;
    let answer = send_loki(
        addr,
        &[("x-scope-orgid", "team-x")],
        r#"{job="x"}"#,
        &["refused org id"],
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert!(
        answer.text().contains("--allow-org-id-tenants"),
        "{}",
        answer.text()
    );
    let answer = send_otlp(addr, &[("x-scope-orgid", "team-x")], &["refused org id"]).await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    let answer = send_loki(
        addr,
        &[("x-scope-orgid", "default")],
        r#"{job="x"}"#,
        &["org id default"],
    )
    .await;
    assert_eq!(answer.status, 204, "{}", answer.text());
    server.stop().await;

    let mut settings = config(db);
    settings.auth.allow_org_id_tenants = true;
    let server = TestServer::start(settings).await;
    let addr = server.http_ingest;
    let answer = send_loki(
        addr,
        &[("x-scope-orgid", "team-x")],
        r#"{job="x"}"#,
        &["for team-x"],
    )
    .await;
    assert_eq!(answer.status, 204, "{}", answer.text());
    let answer = send_loki(addr, &[], r#"{job="x"}"#, &["no org id"]).await;
    assert_eq!(answer.status, 204, "{}", answer.text());

    let long = "t".repeat(100);
    for bad in ["a b", long.as_str(), "team/x", ""] {
        let answer = send_loki(
            addr,
            &[("x-scope-orgid", bad)],
            r#"{job="x"}"#,
            &["bad org"],
        )
        .await;
        assert_eq!(answer.status, 400, "{bad:?}: {}", answer.text());
        assert!(answer.text().contains("X-Scope-OrgID"), "{}", answer.text());
    }
    let rows = db.stored().await;
    let stored: Vec<(&str, &str)> = rows
        .iter()
        .map(|row| (row.message.as_str(), row.tenant.as_str()))
        .collect();
    assert_eq!(
        stored,
        [
            ("for team-x", "team-x"),
            ("no org id", "default"),
            ("org id default", "default")
        ]
    );
    server.stop().await;
}
on_both_backends!(
    http_org_id_tenant,
    a_keyless_server_takes_the_tenant_from_the_org_id
);
