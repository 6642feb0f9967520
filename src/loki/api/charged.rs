//! An answer written in pieces (a series, a stream at a time), each charged to its read as it is
//! written, so that an answer too large for `--max-query-bytes` or for the room left under
//! `--max-read-bytes` is stopped part-way rather than built whole first. Its body holds the charge
//! until its last piece has been handed to the connection, or the connection is gone: an answer
//! waiting for a slow client still counts.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use serde::Serialize;

use crate::error::QueryError;
use crate::query::memory::ReadCharge;

/// An answer being written, and the charge of the read it answers.
#[derive(Debug)]
pub(crate) struct Answer {
    pieces: VecDeque<Bytes>,
    len: u64,
    charge: ReadCharge,
}

impl Answer {
    /// An empty answer of the read that holds `charge`.
    pub(crate) fn new(charge: ReadCharge) -> Self {
        Answer {
            pieces: VecDeque::new(),
            len: 0,
            charge,
        }
    }

    /// The read's charge, for what it builds before and while it writes.
    pub(crate) fn charge(&mut self) -> &mut ReadCharge {
        &mut self.charge
    }

    /// Appends `text`, which takes no memory of its own.
    pub(crate) fn text(&mut self, text: &'static str) {
        self.push(Bytes::from_static(text.as_bytes()));
    }

    /// Appends `value` as JSON, after a comma unless it is the first of its list; charged for
    /// the memory it takes.
    pub(crate) fn json(&mut self, first: bool, value: &impl Serialize) -> Result<(), QueryError> {
        let mut piece = Vec::new();
        if !first {
            piece.push(b',');
        }
        // Writing to memory fails only for a map whose keys are not strings, which no answer has.
        serde_json::to_writer(&mut piece, value).expect("answers serialize to JSON");
        // The vector grew by doubling; the answer keeps only what it wrote.
        piece.shrink_to_fit();
        self.charge.charge(piece.capacity())?;
        self.push(Bytes::from(piece));
        Ok(())
    }

    fn push(&mut self, piece: Bytes) {
        self.len += piece.len() as u64;
        self.pieces.push_back(piece);
    }

    /// The answer as an HTTP body, holding its charge.
    pub(crate) fn into_body(self) -> axum::body::Body {
        axum::body::Body::new(ChargedBody(self))
    }

    /// The answer's bytes, whole.
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.pieces.iter().flatten().copied().collect()
    }
}

/// The body of an [`Answer`]: its pieces in order; the charge goes when the body does.
struct ChargedBody(Answer);

impl http_body::Body for ChargedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let answer = &mut self.get_mut().0;
        Poll::Ready(answer.pieces.pop_front().map(|piece| {
            answer.len -= piece.len() as u64;
            Ok(Frame::data(piece))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.0.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.len)
    }
}
