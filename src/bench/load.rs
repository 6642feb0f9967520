//! Drives a server over real gRPC: concurrent Push streams of pre-encoded chunks, each answered
//! only after its records are committed, with the ack latency of every stream recorded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::codec::PreEncoded;
use bytes::Bytes;
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

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// After this long (streams in flight finish).
    After(Duration),
    /// After this many records have been sent.
    Records(u64),
}

/// How to load the server.
#[derive(Clone, Debug)]
pub struct LoadPlan {
    /// The server's gRPC address, `http://host:port`.
    pub endpoint: String,
    /// Concurrent streams, each on its own connection.
    pub streams: usize,
    /// Chunks a stream sends before it half-closes and waits for its response.
    pub chunks_per_stream: usize,
    /// When to stop.
    pub stop: Stop,
    /// Records per second across all streams; `None` sends as fast as acknowledgements allow.
    pub rate: Option<f64>,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
    /// Push streams or OTLP exports.
    pub protocol: Protocol,
    /// TLS to the server.
    pub tls: crate::tls::ClientTlsArgs,
}

/// Live counters, read by the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    /// Records acknowledged so far.
    pub acked: AtomicU64,
}

/// One acknowledgement: when it came and how long it took.
#[derive(Clone, Copy, Debug)]
pub struct AckSample {
    /// From the start of the run to the response.
    pub at: Duration,
    /// From the stream's half-close (OTLP: the call) to its response.
    pub latency: Duration,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct LoadOutcome {
    /// Records acknowledged as committed.
    pub acked: u64,
    /// Records rejected by the server.
    pub rejected: u64,
    /// Streams that ended with an error status, by code.
    pub failed_streams: Vec<(tonic::Code, u64)>,
    /// Every acknowledgement, in the order the streams finished.
    pub acks: Vec<AckSample>,
    /// From the first send to the last response.
    pub elapsed: Duration,
}

/// Runs the plan and returns what it measured.
pub async fn run(
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
    let mut tasks = Vec::with_capacity(plan.streams);
    for stream in 0..plan.streams {
        let channel = plan
            .tls
            .endpoint(&plan.endpoint)?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(ConnectError::from)?;
        let ctx = StreamContext {
            channel,
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
            api_key: plan.api_key.clone(),
            progress: Arc::clone(&progress),
        };
        tasks.push(match plan.protocol {
            Protocol::Native => tokio::spawn(ctx.run()),
            Protocol::Otlp => tokio::spawn(ctx.run_otlp()),
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
    channel: Channel,
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
    async fn run_otlp(self) -> StreamOutcome {
        let mut outcome = StreamOutcome::default();
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let mut next_chunk = self.first_chunk;
        let mut next_send = tokio::time::Instant::now() + self.phase;
        while self.claim() {
            if let Some(interval) = self.interval {
                tokio::time::sleep_until(next_send).await;
                next_send += interval;
            }
            if grpc.ready().await.is_err() {
                outcome.failures.push(tonic::Code::Unavailable);
                break;
            }
            let chunk = self.chunks[next_chunk % self.chunks.len()].clone();
            next_chunk += 1;
            let sent = Instant::now();
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

    async fn run(self) -> StreamOutcome {
        let mut outcome = StreamOutcome::default();
        let mut grpc = tonic::client::Grpc::new(self.channel.clone());
        let mut next_chunk = self.first_chunk;
        let mut next_send = tokio::time::Instant::now() + self.phase;
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
                let (count, interval, deadline) =
                    (self.chunks_per_stream, self.interval, self.deadline);
                let start = next_chunk;
                let mut next = next_send;
                tokio::spawn(async move {
                    let mut sent = 0;
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
                        if let Some(interval) = interval {
                            tokio::time::sleep_until(next).await;
                            next += interval;
                        }
                        let chunk = chunks[(start + offset) % chunks.len()].clone();
                        if sender.send(chunk).await.is_err() {
                            break;
                        }
                        sent += 1;
                    }
                    // Dropping the sender half-closes the stream: the latency clock starts here.
                    drop(sender);
                    (sent, Instant::now(), next)
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
            let (sent, closed, next) = feeder.await.expect("the feeder does not panic");
            next_chunk += sent;
            next_send = next;
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
