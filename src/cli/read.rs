//! `loghaul query` and `loghaul tail`.

use super::filter_args::{ReadArgs, ReadError};
use super::print::write_all;
use crate::proto::v1::{QueryRequest, TailRequest};
use crate::query::filter::MAX_PAGE_SIZE;

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
            break;
        }
        cursor = page.next_cursor;
    }
    Ok(printed)
}

/// Follows matching records as they are committed until `--limit` or the stream ends.
pub async fn tail(args: TailArgs) -> Result<usize, ReadError> {
    let filter = args.read.filter()?;
    let mut client = args.read.connect().await?;
    let request = args.read.request(TailRequest {
        filter: Some(filter),
        cursor: args.cursor.clone().unwrap_or_default(),
    })?;
    let mut stream = client.tail(request).await?.into_inner();
    let mut printed = 0;
    while let Some(message) = stream.message().await? {
        let mut records = message.records;
        if let Some(limit) = args.limit {
            records.truncate(limit - printed);
        }
        printed += records.len();
        write_all(&mut std::io::stdout().lock(), &records, args.read.json)?;
        if args.limit.is_some_and(|limit| printed >= limit) {
            break;
        }
    }
    Ok(printed)
}
