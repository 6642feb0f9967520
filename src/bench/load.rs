//! Drives a server over real gRPC or HTTP: concurrent Push streams, OTLP Export calls, OTLP/HTTP
//! or Loki posts of pre-encoded chunks, each answered only after its records are committed, with
//! the ack latency of every stream (or call, or post) recorded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::codec::PreEncoded;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use prost::Message;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

use crate::tls::ConnectError;

use super::workload::Protocol;
use crate::auth::request_with_key;
use crate::proto::v1::PushResponse;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;

const PUSH_PATH: &str = "/loghaul.v1.LogIngest/Push";
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
const OTLP_HTTP_PATH: &str = crate::serve::router::OTLP_LOGS_PATH;
const LOKI_PATH: &str = crate::serve::router::LOKI_PUSH_PATH;

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stop {
    /// After this long (streams in flight finish).
    After(Duration),
    /// After this many records have been sent.
    Records(u64),
}

/// How to load the server.
#[derive(Clone, Debug)]
pub(crate) struct LoadPlan {
    /// The servers' gRPC addresses, `http://host:port`; for OTLP/HTTP and Loki, their HTTP
    /// ingest listeners' (plaintext). Stream `i` sends to endpoint `i` modulo their number.
    pub endpoints: Vec<String>,
    /// Concurrent streams, each on its own connection.
    pub streams: usize,
    /// Chunks a stream sends before it half-closes and waits for its response.
    pub chunks_per_stream: usize,
    /// When to stop.
    pub stop: Stop,
    /// Records per second across all streams; `None` sends as fast as acknowledgements allow.
    pub rate: Option<f64>,
    /// Sent as `x-api-key`: stream `i` sends key `i` modulo their number; none when empty.
    pub api_keys: Vec<String>,
    /// Push streams, OTLP exports over gRPC or HTTP, or Loki pushes.
    pub protocol: Protocol,
    /// TLS to the server (gRPC only).
    pub tls: crate::tls::ClientTlsArgs,
}

/// Live counters, read by the progress line.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Records acknowledged so far.
    pub acked: AtomicU64,
}

/// One acknowledgement: when it came and how long it took.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckSample {
    /// From the start of the run to the response.
    pub at: Duration,
    /// To the response from the stream's half-close (OTLP: the call; HTTP: the request). Paced,
    /// from when that was scheduled: a client held up by a slow answer falls behind its schedule,
    /// and every send it delayed counts the delay (no coordinated omission).
    pub latency: Duration,
}

/// What a run measured.
#[derive(Debug, Default)]
pub(crate) struct LoadOutcome {
    /// Records acknowledged as committed.
    pub acked: u64,
    /// Records rejected by the server.
    pub rejected: u64,
    /// Streams (calls, posts) that ended with an error status, by code: an HTTP status is
    /// counted as the gRPC code of the same failure.
    pub failed_streams: Vec<(tonic::Code, u64)>,
    /// Every acknowledgement, in the order the streams finished.
    pub acks: Vec<AckSample>,
    /// From the first send to the last response.
    pub elapsed: Duration,
}

/// Runs the plan and returns what it measured.
pub(crate) async fn run(
    plan: LoadPlan,
    chunks: Arc<Vec<Bytes>>,
    records_per_chunk: usize,
    progress: Arc<Progress>,
) -> Result<LoadOutcome, ConnectError> {
    let started = Instant::now();
    let deadline = match plan.stop {
        Stop::After(duration) => Some(started + duration),
        Stop::Records(_) => None,
    };
    let chunk_budget = match plan.stop {
        Stop::Records(records) => Some(Arc::new(AtomicU64::new(
            records.div_ceil(records_per_chunk as u64),
        ))),
        Stop::After(_) => None,
    };
    // Spread the wanted rate over the streams: each sends a chunk every `interval`.
    let interval = plan
        .rate
        .map(|rate| Duration::from_secs_f64(records_per_chunk as f64 * plan.streams as f64 / rate));
    let http = match plan.protocol {
        Protocol::Native | Protocol::Otlp => Vec::new(),
        Protocol::OtlpHttp | Protocol::Loki => plan
            .endpoints
            .iter()
            .map(|endpoint| HttpTarget::new(endpoint, plan.protocol).map(Arc::new))
            .collect::<Result<_, _>>()?,
    };
    let mut tasks = Vec::with_capacity(plan.streams);
    for stream in 0..plan.streams {
        let endpoint = &plan.endpoints[stream % plan.endpoints.len()];
        let ctx = StreamContext {
            chunks: Arc::clone(&chunks),
            first_chunk: stream * 7919,
            chunks_per_stream: plan.chunks_per_stream,
            records_per_chunk,
            deadline,
            chunk_budget: chunk_budget.clone(),
            interval,
            // Spread the streams' sends over the interval: started in step, they would half-close
            // together and share every batch, so a run's acks would be a few dozen samples eight
            // times over and its p99 would be its maximum.
            phase: interval.map_or(Duration::ZERO, |interval| {
                interval.mul_f64(stream as f64 / plan.streams as f64)
            }),
            api_key: (!plan.api_keys.is_empty())
                .then(|| plan.api_keys[stream % plan.api_keys.len()].clone()),
            progress: Arc::clone(&progress),
        };
        tasks.push(match http.get(stream % plan.endpoints.len()) {
            Some(target) => {
                // Connected here, as the gRPC channels are, so that a wrong address fails the run.
                let connection = target.connect().await?;
                tokio::spawn(ctx.run_http(Arc::clone(target), connection))
            }
            None => {
                let channel = plan
                    .tls
                    .endpoint(endpoint)?
                    .tcp_nodelay(true)
                    .connect()
                    .await
                    .map_err(ConnectError::from)?;
                match plan.protocol {
                    Protocol::Otlp => tokio::spawn(ctx.run_otlp(channel)),
                    _ => tokio::spawn(ctx.run(channel)),
                }
            }
        });
    }
    let mut outcome = LoadOutcome::default();
    let mut failures: std::collections::BTreeMap<i32, u64> = Default::default();
    for task in tasks {
        let stream = task.await.expect("a load task does not panic");
        outcome.acked += stream.acked;
        outcome.rejected += stream.rejected;
        outcome.acks.extend(
            stream
                .latencies
                .into_iter()
                .map(|(answered, latency)| AckSample {
                    at: answered.saturating_duration_since(started),
                    latency,
                }),
        );
        for code in stream.failures {
            *failures.entry(code as i32).or_default() += 1;
        }
    }
    outcome.failed_streams = failures
        .into_iter()
        .map(|(code, count)| (tonic::Code::from_i32(code), count))
        .collect();
    outcome.elapsed = started.elapsed();
    Ok(outcome)
}

struct StreamContext {
    chunks: Arc<Vec<Bytes>>,
    first_chunk: usize,
    chunks_per_stream: usize,
    records_per_chunk: usize,
    deadline: Option<Instant>,
    chunk_budget: Option<Arc<AtomicU64>>,
    interval: Option<Duration>,
    /// Delay of this stream's first send, so that paced streams do not send in step.
    phase: Duration,
    api_key: Option<String>,
    progress: Arc<Progress>,
}

#[derive(Default)]
struct StreamOutcome {
    acked: u64,
    rejected: u64,
    /// When each response came, and its latency.
    latencies: Vec<(Instant, Duration)>,
    failures: Vec<tonic::Code>,
}

impl StreamContext {
    /// Claims the next chunk to send: false once the run is over.
    fn claim(&self) -> bool {
        if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            return false;
        }
        match &self.chunk_budget {
            Some(budget) => budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                    left.checked_sub(1)
                })
                .is_ok(),
            None => true,
        }
    }

    fn request<T>(&self, message: T) -> tonic::Request<T> {
        request_with_key(message, self.api_key.as_deref())
            .expect("bench::run refuses a key that cannot be sent")
    }

    /// OTLP: one unary Export per chunk; its latency runs from the call to the answer.
    async fn run_otlp(self, channel: Channel) -> StreamOutcome {
        let mut outcome = StreamOutcome::default();
        let mut grpc = tonic::client::Grpc::new(channel);
        let mut next_chunk = self.first_chunk;
        let mut schedule = Schedule::new(self.interval, self.phase);
        while self.claim() {
            let scheduled = schedule.next().await;
            if grpc.ready().await.is_err() {
                outcome.failures.push(tonic::Code::Unavailable);
                break;
            }
            let chunk = self.chunks[next_chunk % self.chunks.len()].clone();
            next_chunk += 1;
            let sent = scheduled.unwrap_or_else(Instant::now);
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(EXPORT_PATH);
            let codec = PreEncoded::<ExportLogsServiceResponse>::default();
            match grpc.unary(self.request(chunk), path, codec).await {
                Ok(response) => {
                    let rejected = response
                        .into_inner()
                        .partial_success
                        .map_or(0, |partial| partial.rejected_log_records.max(0) as u64);
                    let accepted = self.records_per_chunk as u64 - rejected;
                    outcome.acked += accepted;
                    outcome.rejected += rejected;
                    self.progress.acked.fetch_add(accepted, Ordering::Relaxed);
                    outcome.latencies.push((Instant::now(), sent.elapsed()));
                }
                Err(status) => {
                    outcome.failures.push(status.code());
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        outcome
    }

    /// OTLP/HTTP or Loki: one POST per chunk on a kept-alive HTTP/1.1 connection, replaced when
    /// the server closes it; the latency runs from the request to the answer's last byte.
    async fn run_http(self, target: Arc<HttpTarget>, connection: Connection) -> StreamOutcome {
        let mut outcome = StreamOutcome::default();
        let mut connection = Some(connection);
        let key = self.api_key.as_deref().map(|key| {
            HeaderValue::from_str(key).expect("bench::run refuses a key that cannot be sent")
        });
        let mut next_chunk = self.first_chunk;
        let mut schedule = Schedule::new(self.interval, self.phase);
        while self.claim() {
            let scheduled = schedule.next().await;
            let chunk = self.chunks[next_chunk % self.chunks.len()].clone();
            next_chunk += 1;
            let records = self.records_per_chunk as u64;
            match target
                .post(&mut connection, chunk, key.as_ref(), records, scheduled)
                .await
            {
                Ok((rejected, latency)) => {
                    let accepted = records - rejected;
                    outcome.acked += accepted;
                    outcome.rejected += rejected;
                    self.progress.acked.fetch_add(accepted, Ordering::Relaxed);
                    outcome.latencies.push((Instant::now(), latency));
                }
                Err(code) => {
                    outcome.failures.push(code);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        outcome
    }

    async fn run(self, channel: Channel) -> StreamOutcome {
        let mut outcome = StreamOutcome::default();
        let mut grpc = tonic::client::Grpc::new(channel);
        let mut next_chunk = self.first_chunk;
        let mut schedule = Schedule::new(self.interval, self.phase);
        loop {
            if self
                .deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
            {
                break;
            }
            let (sender, receiver) = mpsc::channel::<Bytes>(2);
            let feeder = {
                let chunks = Arc::clone(&self.chunks);
                let budget = self.chunk_budget.clone();
                let (count, deadline) = (self.chunks_per_stream, self.deadline);
                let start = next_chunk;
                tokio::spawn(async move {
                    let mut sent = 0;
                    let mut last_scheduled = None;
                    for offset in 0..count {
                        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                            break;
                        }
                        if let Some(budget) = &budget {
                            let claimed =
                                budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                                    left.checked_sub(1)
                                });
                            if claimed.is_err() {
                                break;
                            }
                        }
                        let scheduled = schedule.next().await;
                        let chunk = chunks[(start + offset) % chunks.len()].clone();
                        if sender.send(chunk).await.is_err() {
                            break;
                        }
                        sent += 1;
                        last_scheduled = scheduled;
                    }
                    // Dropping the sender half-closes the stream: the latency clock starts here,
                    // or, paced, when its last chunk was due.
                    drop(sender);
                    (sent, last_scheduled.unwrap_or_else(Instant::now), schedule)
                })
            };
            if grpc.ready().await.is_err() {
                outcome.failures.push(tonic::Code::Unavailable);
                break;
            }
            let request = self.request(ReceiverStream::new(receiver));
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(PUSH_PATH);
            let response = grpc
                .client_streaming(request, path, PreEncoded::<PushResponse>::default())
                .await;
            let answered = Instant::now();
            let (sent, closed, kept) = feeder.await.expect("the feeder does not panic");
            next_chunk += sent;
            schedule = kept;
            match response {
                Ok(response) => {
                    let response = response.into_inner();
                    outcome.acked += response.accepted;
                    outcome.rejected += response.rejected;
                    self.progress
                        .acked
                        .fetch_add(response.accepted, Ordering::Relaxed);
                    if sent > 0 {
                        outcome
                            .latencies
                            .push((answered, answered.saturating_duration_since(closed)));
                    }
                }
                Err(status) => {
                    outcome.failures.push(status.code());
                    // Back off as the server asks instead of hammering it.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            if sent < self.chunks_per_stream || sent == 0 {
                break;
            }
        }
        outcome
    }
}

/// When a paced client's sends are due: every `interval` from its first, whether or not the
/// previous answer has come. A client that falls behind sends what is overdue at once and keeps
/// the schedule, so a stall shows in the latency of every send it delayed.
struct Schedule {
    /// `None`: unpaced, send when ready.
    interval: Option<Duration>,
    next: tokio::time::Instant,
}

impl Schedule {
    fn new(interval: Option<Duration>, phase: Duration) -> Schedule {
        Schedule {
            interval,
            next: tokio::time::Instant::now() + phase,
        }
    }

    /// Waits until the next send is due and returns when that was; `None` when unpaced.
    async fn next(&mut self) -> Option<Instant> {
        let interval = self.interval?;
        let due = self.next;
        tokio::time::sleep_until(due).await;
        self.next += interval;
        Some(due.into_std())
    }
}

/// One HTTP/1.1 connection's sending half.
type Connection = SendRequest<Full<Bytes>>;

/// Where and how the HTTP protocols post.
struct HttpTarget {
    /// `host:port`: connected to, and sent as `Host`.
    authority: String,
    protocol: Protocol,
}

impl HttpTarget {
    /// The listener at `endpoint`, `http://host:port` (port 80 when none is given).
    fn new(endpoint: &str, protocol: Protocol) -> Result<Self, ConnectError> {
        let refused = |detail: &str| ConnectError::Http {
            endpoint: endpoint.to_owned(),
            detail: detail.to_owned(),
        };
        let uri: hyper::Uri = endpoint
            .parse()
            .map_err(|_| refused("not a URL like http://host:4318"))?;
        if uri.scheme_str().is_some_and(|scheme| scheme != "http") {
            return Err(refused(
                "OTLP/HTTP and Loki are sent in plaintext: use http://",
            ));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(refused(
                "give the listener's address (http://host:4318); the protocol's path is added",
            ));
        }
        let host = uri.host().ok_or_else(|| refused("no host in the URL"))?;
        Ok(HttpTarget {
            authority: format!("{host}:{}", uri.port_u16().unwrap_or(80)),
            protocol,
        })
    }

    async fn connect(&self) -> Result<Connection, ConnectError> {
        let refused = |detail: String| ConnectError::Http {
            endpoint: format!("http://{}", self.authority),
            detail,
        };
        let stream = TcpStream::connect(&self.authority)
            .await
            .map_err(|err| refused(err.to_string()))?;
        stream
            .set_nodelay(true)
            .map_err(|err| refused(err.to_string()))?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|err| refused(err.to_string()))?;
        tokio::spawn(async move {
            // Ends when the server closes the connection; the sender then reports it closed.
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Posts one chunk of `records` records; returns how many the server rejected and how long
    /// the answer took (since `scheduled` when paced), or the gRPC code of the failure. A
    /// connection that broke is dropped, and the next post opens another.
    async fn post(
        &self,
        connection: &mut Option<Connection>,
        chunk: Bytes,
        key: Option<&HeaderValue>,
        records: u64,
        scheduled: Option<Instant>,
    ) -> Result<(u64, Duration), tonic::Code> {
        if connection.as_ref().is_none_or(SendRequest::is_closed) {
            *connection = None;
            *connection = Some(self.connect().await.map_err(|_| tonic::Code::Unavailable)?);
        }
        let sender = connection.as_mut().expect("connected above");
        if sender.ready().await.is_err() {
            *connection = None;
            return Err(tonic::Code::Unavailable);
        }
        let path = match self.protocol {
            Protocol::Loki => LOKI_PATH,
            _ => OTLP_HTTP_PATH,
        };
        let mut request = hyper::Request::post(path)
            .header(HOST, self.authority.as_str())
            .header(CONTENT_TYPE, "application/x-protobuf");
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let request = request
            .body(Full::new(chunk))
            .expect("the path and headers are valid");
        let sent = scheduled.unwrap_or_else(Instant::now);
        let answered = async {
            let response = sender.send_request(request).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        };
        let (status, body) = match answered.await {
            Ok(answer) => answer,
            Err(_) => {
                *connection = None;
                return Err(tonic::Code::Unavailable);
            }
        };
        let latency = sent.elapsed();
        http_answer(self.protocol, status, &body, records).map(|rejected| (rejected, latency))
    }
}

/// The records an HTTP answer says were rejected, or the gRPC code of a failed request. OTLP/HTTP
/// answers 200 with a `partial_success` naming rejections; Loki answers 204, or 400 with
/// `N of M entries rejected (…)` when the other entries were stored.
fn http_answer(
    protocol: Protocol,
    status: u16,
    body: &[u8],
    records: u64,
) -> Result<u64, tonic::Code> {
    let rejected = match (protocol, status) {
        (Protocol::Loki, 200 | 204) => Some(0),
        (Protocol::Loki, 400) => loki_rejected(body),
        (_, 200) => {
            let answer =
                ExportLogsServiceResponse::decode(body).map_err(|_| tonic::Code::Internal)?;
            Some(
                answer
                    .partial_success
                    .map_or(0, |partial| partial.rejected_log_records.max(0) as u64),
            )
        }
        _ => None,
    };
    match rejected {
        Some(rejected) => Ok(rejected.min(records)),
        None => Err(http_failure(status)),
    }
}

/// `N` of a Loki 400 that stored the other entries: `N of M entries rejected (…): …`.
fn loki_rejected(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    let mut words = text.split_whitespace();
    let rejected = words.next()?.parse().ok()?;
    let _received: u64 = words.nth(1)?.parse().ok()?;
    (words.next()? == "entries" && words.next()? == "rejected").then_some(rejected)
}

/// The gRPC code of an HTTP failure, as the same failure is answered over gRPC where the two
/// agree (an overloaded server's 503 is `UNAVAILABLE` here, where gRPC says `RESOURCE_EXHAUSTED`).
fn http_failure(status: u16) -> tonic::Code {
    match status {
        400 | 415 => tonic::Code::InvalidArgument,
        401 => tonic::Code::Unauthenticated,
        403 => tonic::Code::PermissionDenied,
        404 | 405 => tonic::Code::Unimplemented,
        408 => tonic::Code::DeadlineExceeded,
        413 | 429 => tonic::Code::ResourceExhausted,
        502..=504 => tonic::Code::Unavailable,
        500 => tonic::Code::Internal,
        _ => tonic::Code::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paused clock is tokio's; the schedule hands out its instants as std ones.
    fn clock() -> Instant {
        tokio::time::Instant::now().into_std()
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_client_that_falls_behind_keeps_its_schedule() {
        let started = clock();
        let mut schedule = Schedule::new(Some(Duration::from_millis(10)), Duration::from_millis(3));
        let first = schedule.next().await.unwrap();
        assert_eq!(first - started, Duration::from_millis(3));
        // An answer takes 35 ms: the sends due meanwhile go at once, each dated when it was due,
        // so each one's latency counts the wait it had.
        tokio::time::sleep(Duration::from_millis(35)).await;
        for due in [13, 23, 33] {
            let scheduled = schedule.next().await.unwrap();
            assert_eq!(scheduled - started, Duration::from_millis(due));
            assert_eq!(clock() - started, Duration::from_millis(38));
        }
        // Caught up, it waits for the next due time again.
        let scheduled = schedule.next().await.unwrap();
        assert_eq!(scheduled - started, Duration::from_millis(43));
        assert_eq!(clock() - started, Duration::from_millis(43));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unpaced_client_sends_when_ready() {
        let mut schedule = Schedule::new(None, Duration::from_millis(3));
        let started = clock();
        assert_eq!(schedule.next().await, None);
        assert_eq!(clock(), started);
    }
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsPartialSuccess;

    #[test]
    fn http_answers_count_rejections_or_name_the_failure() {
        let partial = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 3,
                error_message: "3 of 10 records rejected".into(),
            }),
        }
        .encode_to_vec();
        assert_eq!(http_answer(Protocol::OtlpHttp, 200, &partial, 10), Ok(3));
        assert_eq!(http_answer(Protocol::OtlpHttp, 200, b"", 10), Ok(0));
        assert_eq!(http_answer(Protocol::Loki, 204, b"", 10), Ok(0));
        let text =
            b"2 of 10 entries rejected (#n is an entry's position): #0 too big; #7 too old\n";
        assert_eq!(http_answer(Protocol::Loki, 400, text, 10), Ok(2));
        for (status, code) in [
            (429, tonic::Code::ResourceExhausted),
            (413, tonic::Code::ResourceExhausted),
            (503, tonic::Code::Unavailable),
            (400, tonic::Code::InvalidArgument),
            (401, tonic::Code::Unauthenticated),
        ] {
            for protocol in [Protocol::OtlpHttp, Protocol::Loki] {
                let body = b"PushRequest: malformed";
                assert_eq!(http_answer(protocol, status, body, 10), Err(code));
            }
        }
        assert_eq!(
            http_answer(Protocol::OtlpHttp, 200, b"\xff\xff", 10),
            Err(tonic::Code::Internal)
        );
    }

    #[test]
    fn an_http_target_is_a_plaintext_base_url() {
        let target = HttpTarget::new("http://127.0.0.1:4318", Protocol::Loki).unwrap();
        assert_eq!(target.authority, "127.0.0.1:4318");
        let target = HttpTarget::new("http://[::1]:9", Protocol::Loki).unwrap();
        assert_eq!(target.authority, "[::1]:9");
        assert_eq!(
            HttpTarget::new("http://loghaul/", Protocol::OtlpHttp)
                .unwrap()
                .authority,
            "loghaul:80"
        );
        for refused in ["https://loghaul:4318", "http://loghaul:4318/v1/logs", "::"] {
            assert!(
                HttpTarget::new(refused, Protocol::OtlpHttp).is_err(),
                "{refused}"
            );
        }
    }
}
