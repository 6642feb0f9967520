//! What reads (Query, Tail, the console, the Loki API) may take (`crate::query`).

use clap::Args;
use serde::{Deserialize, Serialize};

use super::{ByteSize, HumanDuration};

/// The read pool, read timeouts, admission and memory limits, and the tails' pace.
#[derive(Clone, Debug, Args, Serialize, Deserialize)]
pub struct QueryOptions {
    /// Connections for Query and Tail, separate from the writers so reads never wait behind ingest.
    /// On SQLite a metric query's scan of a few streams among many takes a second one while
    /// another stays free.
    #[arg(long, env = "LOGHAUL_READ_MAX_CONNECTIONS", default_value_t = 4)]
    pub read_max_connections: u32,

    /// How long one read may take: a Query page (or a console page) past it ends with
    /// DEADLINE_EXCEEDED (HTTP 504) and its database work is stopped, and so is a Tail poll (a
    /// tail ends after several in a row). PostgreSQL sessions get a statement_timeout a second
    /// above it, so even a query the service lost track of is cancelled by the server.
    #[arg(long, env = "LOGHAUL_QUERY_TIMEOUT", default_value = "10s")]
    pub query_timeout: HumanDuration,

    /// Reads (Query and console pages, Tail polls) one tenant may have running at once; one more
    /// waits up to 250 ms for a slot, then gets RESOURCE_EXHAUSTED (HTTP 429). Keep it below
    /// --read-max-connections, so that one tenant never holds every read connection.
    #[arg(
        long,
        env = "LOGHAUL_MAX_CONCURRENT_READS_PER_TENANT",
        default_value_t = 2
    )]
    pub max_concurrent_reads_per_tenant: usize,

    /// Memory the reads of every tenant together may hold: LogQL queries' series and points,
    /// log lines, Query and console pages, and answers until they are sent. A read that would take
    /// more is stopped and refused with 503 and Retry-After (RESOURCE_EXHAUSTED over gRPC); the
    /// service's memory stays within about this much above what ingest holds.
    #[arg(long, env = "LOGHAUL_MAX_READ_BYTES", default_value = "256MiB")]
    pub max_read_bytes: ByteSize,

    /// Memory one read may hold: a LogQL query's series × steps, their labels and its answer. A
    /// metric query past it is answered a run of steps at a time; a read that still passes it is
    /// stopped and refused with 400 (RESOURCE_EXHAUSTED over gRPC) naming this option. A quarter
    /// of --max-read-bytes by default, so that four of the largest reads fit at once; at least
    /// twice --max-page-bytes, which a page reserves.
    #[arg(long, env = "LOGHAUL_MAX_QUERY_BYTES", default_value = "64MiB")]
    pub max_query_bytes: ByteSize,

    /// Most series a LogQL metric query may answer with (those with a point), as Loki's
    /// max_query_series: one with more is refused with 400 saying so. It bounds the answer, not
    /// what the answer is computed from (count(count_over_time(…)) over thousands of streams is
    /// one series), which --max-query-bytes bounds. 1 to 1000000.
    #[arg(long, env = "LOGHAUL_MAX_QUERY_SERIES", default_value_t = 500)]
    pub max_query_series: usize,

    /// Tails (gRPC and console) open at once on this server; one more gets RESOURCE_EXHAUSTED
    /// (HTTP 429). Each polls the database every --tail-poll-interval.
    #[arg(long, env = "LOGHAUL_MAX_TAILS", default_value_t = 256)]
    pub max_tails: usize,

    /// Tails one tenant may have open at once; one more gets RESOURCE_EXHAUSTED (HTTP 429).
    #[arg(long, env = "LOGHAUL_MAX_TAILS_PER_TENANT", default_value_t = 32)]
    pub max_tails_per_tenant: usize,

    /// How far back a Query (or console search) without `from` reads: from this long before `to`,
    /// or before now. The answer says where it started (`default_from`). 0s: no bound, back to
    /// the oldest record.
    #[arg(long, env = "LOGHAUL_QUERY_DEFAULT_RANGE", default_value = "24h")]
    pub query_default_range: HumanDuration,

    /// Largest Query page or Tail message (console pages and tail events too), as encoded; a page
    /// that reaches it stops early and its cursor continues after its last record. A record
    /// larger than this still goes out, alone. Keep it under the clients' message limit (4 MiB
    /// for most gRPC clients).
    #[arg(long, env = "LOGHAUL_MAX_PAGE_BYTES", default_value = "2MiB")]
    pub max_page_bytes: ByteSize,

    /// How often a Tail polls the database for new records: the bound on its delivery delay.
    #[arg(long, env = "LOGHAUL_TAIL_POLL_INTERVAL", default_value = "500ms")]
    pub tail_poll_interval: HumanDuration,

    /// Most bytes of records queued for one tail subscriber (gRPC, console or Loki), counted
    /// as encoded until its connection has taken them; a tail reads the database only as far
    /// as its queue has room, and a tail message holds at most a quarter of it (and at most
    /// --max-page-bytes). A subscriber whose queue stays full for 5s is dropped as too slow
    /// (RESOURCE_EXHAUSTED, a console error event, WebSocket close 1008) and its queue
    /// released. 64KiB to 1GiB.
    #[arg(long, env = "LOGHAUL_TAIL_QUEUE_BYTES", default_value = "4MiB")]
    pub tail_queue_bytes: ByteSize,
}
