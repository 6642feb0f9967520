//! Tenants end to end: keys are checked on every service, a key only ever sees its tenant's
//! records, and one tenant's rate limit leaves the others alone.

use std::time::{Duration, Instant};

use crate::common::{config, push_as, query_all, record, with_key, TestDb, TestServer};
use loghaul::proto::v1::{Filter, QueryRequest, TailRequest};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_types::StatusExt;

const KEYS: &str = "key-a=team-a,key-b=team-b";

async fn unauthenticated_calls_are_refused_on_every_service(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    let server = TestServer::start(settings).await;
    let mut ingest = server.client().await;
    let mut query = server.query_client().await;
    let mut otlp = LogsServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    for key in ["", "not-a-key"] {
        let pushed = push_as(&mut ingest, key, vec![vec![record("x")]]).await;
        assert_eq!(
            pushed.unwrap_err().code(),
            Code::Unauthenticated,
            "push with {key:?}"
        );
        let queried = query.query(with_key(key, QueryRequest::default())).await;
        assert_eq!(
            queried.unwrap_err().code(),
            Code::Unauthenticated,
            "query with {key:?}"
        );
        let tailed = query.tail(with_key(key, TailRequest::default())).await;
        assert_eq!(
            tailed.unwrap_err().code(),
            Code::Unauthenticated,
            "tail with {key:?}"
        );
        let exported = otlp
            .export(with_key(key, ExportLogsServiceRequest::default()))
            .await;
        assert_eq!(
            exported.unwrap_err().code(),
            Code::Unauthenticated,
            "otlp export with {key:?}"
        );
    }
    let exported = otlp
        .export(with_key("key-a", ExportLogsServiceRequest::default()))
        .await;
    assert!(exported.is_ok(), "a valid key passes: {exported:?}");
    assert_eq!(db.count().await, 0, "nothing unauthenticated was stored");

    // Kubernetes gRPC probes carry no key: health is exempt.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let status = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(status.into_inner().status, 1, "SERVING");

    // A good key works, and the failures were counted by reason.
    let pushed = push_as(&mut ingest, "key-a", vec![vec![record("ok")]])
        .await
        .unwrap();
    assert_eq!(pushed.accepted, 1);
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("loghaul_auth_failures_total{reason=\"missing_key\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("loghaul_auth_failures_total{reason=\"unknown_key\"}"));
    assert!(!metrics.contains("not-a-key"), "keys never reach metrics");
    server.stop().await;
}
on_both_backends!(
    refused_without_key,
    unauthenticated_calls_are_refused_on_every_service
);

async fn a_key_never_sees_another_tenants_records(db: &TestDb) {
    let mut settings = config(db);
    settings.auth.api_keys = Some(KEYS.parse().unwrap());
    settings.query.tail_poll_interval = "50ms".parse().unwrap();
    let server = TestServer::start(settings).await;
    let mut query = server.query_client().await;
    let mut tail_a = query
        .tail(with_key("key-a", TailRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let mut ingest = server.client().await;
    let a: Vec<_> = (0..30).map(|n| record(format!("a-{n}"))).collect();
    let b: Vec<_> = (0..30).map(|n| record(format!("b-{n}"))).collect();
    push_as(&mut ingest, "key-a", vec![a]).await.unwrap();
    push_as(&mut ingest, "key-b", vec![b]).await.unwrap();

    for (key, prefix) in [("key-a", "a-"), ("key-b", "b-")] {
        let records = query_all(&mut query, key, Filter::default(), 7)
            .await
            .unwrap();
        assert_eq!(records.len(), 30, "{key} sees exactly its records");
        assert!(records.iter().all(|r| r.message.starts_with(prefix)));
        // Naming the other tenant's data in filters changes nothing.
        let other = query_all(
            &mut query,
            key,
            Filter {
                contains: if prefix == "a-" {
                    "b-".into()
                } else {
                    "a-".into()
                },
                ..Filter::default()
            },
            100,
        )
        .await
        .unwrap();
        assert!(
            other.is_empty(),
            "{key} cannot find the other tenant's records"
        );
    }

    let mut tailed = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tailed.len() < 30 && Instant::now() < deadline {
        let message = tokio::time::timeout(Duration::from_secs(5), tail_a.message())
            .await
            .expect("the tail delivers within 5 s")
            .unwrap()
            .unwrap();
        tailed.extend(message.records.into_iter().map(|r| r.message));
    }
    assert_eq!(tailed.len(), 30);
    assert!(tailed.iter().all(|m| m.starts_with("a-")), "{tailed:?}");
    // Nothing of B's arrives later either.
    let more = tokio::time::timeout(Duration::from_millis(500), tail_a.message()).await;
    assert!(more.is_err(), "no further records for A: {more:?}");
    server.stop().await;
}
on_both_backends!(tenant_isolation, a_key_never_sees_another_tenants_records);

async fn one_noisy_tenant_does_not_slow_the_others(db: &TestDb) {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    std::fs::write(
        &keys,
        "[keys]\nkey-noisy = \"noisy\"\nkey-quiet = \"quiet\"\n\
         [tenants.noisy]\nrecords-per-second = 200\nburst = \"1s\"\n",
    )
    .unwrap();
    let mut settings = config(db);
    settings.auth.api_keys_file = Some(keys);
    let server = TestServer::start(settings).await;

    // The noisy tenant sends as fast as it can, on four streams, retrying when refused.
    let started = Instant::now();
    let mut noisy = Vec::new();
    for stream in 0..4 {
        let mut client = server.client().await;
        noisy.push(tokio::spawn(async move {
            let (mut accepted, mut limited, mut retry_hint) = (0, 0, Duration::ZERO);
            for chunk in 0..25 {
                let records = (0..100)
                    .map(|n| record(format!("noisy-{stream}-{chunk}-{n}")))
                    .collect();
                match push_as(&mut client, "key-noisy", vec![records]).await {
                    Ok(response) => accepted += response.accepted,
                    Err(status) => {
                        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                        let retry = status.get_details_retry_info().expect("RetryInfo");
                        retry_hint = retry.retry_delay.expect("a delay");
                        limited += 1;
                    }
                }
            }
            (accepted, limited, retry_hint)
        }));
    }
    // Meanwhile the quiet tenant sends 5,000 records in 10 streams.
    let mut quiet = Vec::new();
    for stream in 0..10 {
        let mut client = server.client().await;
        quiet.push(tokio::spawn(async move {
            let began = Instant::now();
            let chunks = (0..5)
                .map(|chunk| {
                    (0..100)
                        .map(|n| record(format!("quiet-{stream}-{chunk}-{n}")))
                        .collect()
                })
                .collect();
            let response = push_as(&mut client, "key-quiet", chunks).await.unwrap();
            (response.accepted, began.elapsed())
        }));
    }
    for stream in quiet {
        let (accepted, took) = stream.await.unwrap();
        assert_eq!(accepted, 500, "the quiet tenant loses nothing");
        assert!(
            took < Duration::from_secs(5),
            "a quiet stream took {took:?}"
        );
    }
    let (mut accepted, mut limited) = (0, 0);
    for stream in noisy {
        let (ok, refused, retry) = stream.await.unwrap();
        accepted += ok;
        limited += refused;
        if refused > 0 {
            assert!(
                retry > Duration::ZERO && retry <= Duration::from_secs(1),
                "{retry:?}"
            );
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(limited > 0, "the noisy tenant was limited");
    // Burst (200) plus 200/s, plus one chunk that may overdraw the bucket.
    let allowed = 200.0 + 200.0 * elapsed + 100.0;
    assert!(
        (accepted as f64) <= allowed,
        "noisy accepted {accepted} in {elapsed:.1}s (allowed {allowed:.0})"
    );
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM logs WHERE tenant = 'quiet'")
            .await,
        5000
    );
    assert_eq!(
        db.query_scalar("SELECT count(*) FROM logs WHERE tenant = 'noisy'")
            .await,
        accepted as i64
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("loghaul_rate_limited_total{tenant=\"noisy\"}"),
        "{metrics}"
    );
    // Every tenant's series exists from the start, at zero until it is limited.
    assert!(
        metrics.contains("loghaul_rate_limited_total{tenant=\"quiet\"} 0\n"),
        "{metrics}"
    );
    server.stop().await;
}
on_both_backends!(noisy_tenant, one_noisy_tenant_does_not_slow_the_others);
