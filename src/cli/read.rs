//! `loghaul query` and `loghaul tail`.

use super::filter_args::{ReadArgs, ReadError};
use crate::model::filter::MAX_PAGE_SIZE;
use crate::proto::v1::{QueryRequest, TailRequest};
use crate::query::render::write_all;

/// Options of `loghaul query`.
#[derive(Clone, Debug, clap::Args)]
pub struct QueryArgs {
    /// Connection and filters.
    #[command(flatten)]
    pub read: ReadArgs,
    /// Most records to print; pages are followed until this many or the end.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

/// Options of `loghaul tail`.
#[derive(Clone, Debug, clap::Args)]
pub struct TailArgs {
    /// Connection and filters.
    #[command(flatten)]
    pub read: ReadArgs,
    /// Resume after this record (a `cursor` from `--json` output); default: from now.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Stop after this many records; default: follow until interrupted.
    #[arg(long)]
    pub limit: Option<usize>,
}

/// Prints up to `--limit` matching records, newest first; returns how many.
pub async fn query(args: QueryArgs) -> Result<usize, ReadError> {
    let filter = args.read.filter()?;
    let mut client = args.read.connect().await?;
    let mut out = std::io::stdout().lock();
    let mut printed = 0;
    let mut cursor = String::new();
    while printed < args.limit {
        let page_size = (args.limit - printed).min(MAX_PAGE_SIZE) as u32;
        let request = args.read.request(QueryRequest {
            filter: Some(filter.clone()),
            page_size,
            cursor: cursor.clone(),
        })?;
        let page = client.query(request).await?.into_inner();
        printed += page.records.len();
        write_all(&mut out, &page.records, args.read.json)?;
        if page.next_cursor.is_empty() {
            // On stderr, so that it never mixes with the records.
            if let Some(from) = &page.default_from {
                eprintln!(
                    "note: searched from {} on (the server's default range); give --since or --from to search further back",
                    crate::query::render::time(Some(from))
                );
            }
            break;
        }
        cursor = page.next_cursor;
    }
    Ok(printed)
}

/// Consecutive failed attempts to (re)open the tail before giving up.
const MAX_RECONNECTS: u32 = 5;
/// Pause before reopening a tail that broke.
const RECONNECT_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// True for statuses that mean "this connection or replica went away", not "this request is wrong":
/// the server asks clients to reconnect after `--max-connection-age` and ends tails with
/// UNAVAILABLE when it shuts down, so a tail that should run for hours must resume.
fn worth_resuming(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

/// Follows matching records as they are committed until `--limit`, interruption, or an error
/// that reconnecting cannot fix. A broken stream is reopened after the last record printed (or,
/// before any, from the moment of reopening), so records are neither repeated nor, apart from
/// ones committed before the first record while reconnecting, skipped.
pub async fn tail(args: TailArgs) -> Result<usize, ReadError> {
    let filter = args.read.filter()?;
    let mut cursor = args.cursor.clone().unwrap_or_default();
    let mut printed = 0;
    let mut failures = 0;
    loop {
        let before = printed;
        match follow(&args, &filter, &mut cursor, &mut printed).await {
            Ok(()) => return Ok(printed),
            Err(ReadError::Status(status)) if worth_resuming(&status) => {}
            Err(ReadError::Connect { .. }) if failures > 0 => {}
            Err(err) => return Err(err),
        }
        // A stream that delivered something before breaking starts the count afresh.
        failures = if printed > before { 1 } else { failures + 1 };
        if failures >= MAX_RECONNECTS {
            return Err(ReadError::Usage(format!(
                "the tail broke {MAX_RECONNECTS} times in a row; giving up"
            )));
        }
        tokio::time::sleep(RECONNECT_PAUSE).await;
    }
}

/// One tail stream: prints records and remembers the last cursor; Ok when `--limit` is reached or
/// the server ended the stream cleanly.
async fn follow(
    args: &TailArgs,
    filter: &crate::proto::v1::Filter,
    cursor: &mut String,
    printed: &mut usize,
) -> Result<(), ReadError> {
    let mut client = args.read.connect().await?;
    let request = args.read.request(TailRequest {
        filter: Some(filter.clone()),
        cursor: cursor.clone(),
    })?;
    let mut stream = client.tail(request).await?.into_inner();
    while let Some(message) = stream.message().await? {
        let mut records = message.records;
        if let Some(limit) = args.limit {
            records.truncate(limit - *printed);
        }
        if let Some(last) = records.last() {
            cursor.clone_from(&last.cursor);
        }
        *printed += records.len();
        write_all(&mut std::io::stdout().lock(), &records, args.read.json)?;
        if args.limit.is_some_and(|limit| *printed >= limit) {
            return Ok(());
        }
    }
    Ok(())
}
