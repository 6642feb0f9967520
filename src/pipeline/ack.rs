//! Acknowledgements: each chunk carries a one-shot handle that the batcher resolves after the
//! commit of the batch that holds it, or fails with the error that stopped it.

use tokio::sync::oneshot;

use crate::storage::StoreError;

/// A record of a committed chunk that the database refused, by its position in the chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct RowRejection {
    /// Position among the records the chunk carried.
    pub position: usize,
    /// The database's reason.
    pub reason: String,
}

/// What became of a chunk's records once its batch was committed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stored {
    /// Records the database refused (usually none).
    pub refused: Vec<RowRejection>,
    /// The chunk's (producer, sequence) had already been stored: nothing was written again and
    /// its records count as accepted.
    pub duplicate: bool,
}

/// The outcome of one chunk, or why none of its records was stored.
pub(crate) type AckResult = Result<Stored, StoreError>;

/// Resolved by the batcher.
pub(crate) type AckSender = oneshot::Sender<AckResult>;

/// Awaited by the stream handler.
pub(crate) type AckReceiver = oneshot::Receiver<AckResult>;

/// A new acknowledgement pair.
pub(crate) fn channel() -> (AckSender, AckReceiver) {
    oneshot::channel()
}
