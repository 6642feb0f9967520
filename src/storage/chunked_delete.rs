//! Deletes in bounded chunks, for retention and for the pruning of old chunk keys: no delete holds
//! the writer for long, and queued ingest batches get it in between.

use std::time::Duration;

/// Rows deleted per transaction, so no delete holds the writer for long.
pub(crate) const DELETE_CHUNK: i64 = 5_000;
/// Pause between delete chunks, so queued ingest batches get the writer in between.
pub(crate) const CHUNK_PAUSE: Duration = Duration::from_millis(10);

/// Runs `delete_chunk` (which deletes at most [`DELETE_CHUNK`] rows and says how many) until a
/// chunk comes back short, pausing [`CHUNK_PAUSE`] between chunks; returns the rows deleted.
pub(crate) async fn delete_in_chunks<F, Fut, E>(mut delete_chunk: F) -> Result<u64, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, E>>,
{
    let mut deleted = 0;
    loop {
        let chunk = delete_chunk().await?;
        deleted += chunk;
        if chunk < DELETE_CHUNK as u64 {
            return Ok(deleted);
        }
        tokio::time::sleep(CHUNK_PAUSE).await;
    }
}
