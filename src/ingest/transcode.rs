//! What the JSON transcoders (OTLP/JSON, Loki JSON) share: the protobuf they write, every byte
//! of it taken from an [`Allowance`] before it is written; the records they refuse, kept compact
//! ([`Refused`], kept with the other rejections in [`crate::ingest::rejections`]); and
//! [`charged`], which runs one on a blocking thread and charges the request's meter each time it
//! asks for more.
//!
//! A refused record leaves nothing in the protobuf: it is one bit in [`Refused`], and only the
//! first few keep their reason. A body of two million malformed records then costs its own size
//! and a quarter of a MiB of bits, where a reason each would be hundreds of MB.

use std::fmt;

use bytes::Bytes;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;
use tokio::sync::{mpsc, oneshot};

use crate::error::IngestError;
pub use crate::ingest::rejections::Refused;
use crate::ingest::validate::RejectReason;
use crate::pipeline::Meter;

/// Bytes a transcoder asks for at a time beyond what it needs at once: few enough round trips
/// to the meter, little enough held but unused.
const STEP: usize = 64 * 1024;

/// Where a transcoder takes memory from before it holds it.
pub trait Allowance {
    /// Takes `bytes` more; `Err` stops the transcoder.
    fn take(&mut self, bytes: usize) -> Result<(), Stopped>;
}

/// The allowance ran out: the meter refused, or the request went away.
#[derive(Debug)]
pub struct Stopped;

/// An allowance without a limit, for callers that hold the whole body anyway (tests, fuzzing).
pub struct Unlimited;

impl Allowance for Unlimited {
    fn take(&mut self, _bytes: usize) -> Result<(), Stopped> {
        Ok(())
    }
}

/// A transcoded body: the protobuf, with no trace of the refused records, and the refused.
#[derive(Debug, Default)]
pub struct Transcoded {
    /// The encoded request.
    pub protobuf: Vec<u8>,
    /// The records that did not deserialize.
    pub refused: Refused,
}

/// Why a transcoder stopped.
#[derive(Debug)]
pub enum TranscodeError {
    /// The body is not well formed around its records; the text says where.
    Malformed(String),
    /// Its allowance ran out.
    Stopped,
}

/// An embedded message begun in the output, its length not yet known.
#[must_use]
pub struct Nested {
    /// Where the field's key starts.
    key_at: usize,
    /// Where the room for its length starts.
    len_at: usize,
}

/// Room left for an embedded message's length: a varint of up to 2^35, past any body.
const LEN_ROOM: usize = 5;

/// The output of a transcoder: protobuf written straight into one buffer (an embedded message's
/// length is filled in when it ends, so it is never built apart and copied in), and the refused
/// records, all of it taken from the allowance before it is held.
pub struct Writer<'a> {
    protobuf: Vec<u8>,
    refused: Refused,
    next_index: u64,
    allowance: &'a mut dyn Allowance,
    /// Bytes taken from the allowance so far.
    granted: usize,
    /// Set when the allowance ran out, so that the parser's error is read as that.
    stopped: bool,
}

impl<'a> Writer<'a> {
    /// An empty output taking from `allowance`.
    pub fn new(allowance: &'a mut dyn Allowance) -> Self {
        Writer {
            protobuf: Vec::new(),
            refused: Refused::default(),
            next_index: 0,
            allowance,
            granted: 0,
            stopped: false,
        }
    }

    /// The index of the next record in the request.
    pub fn next_index(&mut self) -> u64 {
        self.next_index += 1;
        self.next_index - 1
    }

    /// Makes sure `more` bytes can be held beyond what is, taking at least a step more when not.
    fn make_room<E: serde::de::Error>(&mut self, more: usize) -> Result<(), E> {
        let stop = || E::custom("the memory budget refused more");
        if self.stopped {
            return Err(stop());
        }
        let needed = self.protobuf.len() + self.refused.held_bytes() + more;
        if needed <= self.granted {
            return Ok(());
        }
        let take = (needed - self.granted).max(STEP);
        if self.allowance.take(take).is_err() {
            self.stopped = true;
            return Err(stop());
        }
        self.granted += take;
        Ok(())
    }

    /// Appends `bytes` as the length-delimited field `number`.
    pub fn put_bytes<E: serde::de::Error>(&mut self, number: u32, bytes: &[u8]) -> Result<(), E> {
        self.make_room(10 + bytes.len())?;
        crate::wire::fields::put_field(&mut self.protobuf, number, bytes);
        Ok(())
    }

    /// Appends `message` as the embedded message field `number`.
    pub fn put_message<E: serde::de::Error>(
        &mut self,
        number: u32,
        message: &impl Message,
    ) -> Result<(), E> {
        let len = message.encoded_len();
        self.make_room(10 + len)?;
        encode_key(number, WireType::LengthDelimited, &mut self.protobuf);
        encode_varint(len as u64, &mut self.protobuf);
        message.encode_raw(&mut self.protobuf);
        Ok(())
    }

    /// Begins the embedded message field `number`, whose fields are written next.
    pub fn begin<E: serde::de::Error>(&mut self, number: u32) -> Result<Nested, E> {
        self.make_room(5 + LEN_ROOM)?;
        let key_at = self.protobuf.len();
        encode_key(number, WireType::LengthDelimited, &mut self.protobuf);
        let len_at = self.protobuf.len();
        self.protobuf.extend_from_slice(&[0; LEN_ROOM]);
        Ok(Nested { key_at, len_at })
    }

    /// Ends `nested`: writes its length and moves its fields up to it.
    pub fn end(&mut self, nested: Nested) {
        let start = nested.len_at + LEN_ROOM;
        let len = (self.protobuf.len() - start) as u64;
        let mut room = &mut self.protobuf[nested.len_at..start];
        encode_varint(len, &mut room);
        let written = encoded_len_varint(len);
        self.protobuf.copy_within(start.., nested.len_at + written);
        self.protobuf
            .truncate(self.protobuf.len() - (LEN_ROOM - written));
    }

    /// Takes back `nested`, begun for a message that turned out not to be there.
    pub fn cancel(&mut self, nested: Nested) {
        self.protobuf.truncate(nested.key_at);
    }

    /// Counts record `index` refused for `reason`; `detail` says why, and is written out only
    /// when it is kept.
    pub fn refuse<E: serde::de::Error>(
        &mut self,
        index: u64,
        reason: RejectReason,
        detail: &dyn fmt::Display,
    ) -> Result<(), E> {
        self.make_room(self.refused.growth_for(index))?;
        self.refused.add(index, reason, detail);
        Ok(())
    }

    /// What was written, or why the parse that wrote it failed: the allowance, or `malformed`.
    pub fn finish(self, parsed: Result<(), String>) -> Result<(Transcoded, usize), TranscodeError> {
        match parsed {
            Ok(()) => Ok((
                Transcoded {
                    protobuf: self.protobuf,
                    refused: self.refused,
                },
                self.granted,
            )),
            Err(_) if self.stopped => Err(TranscodeError::Stopped),
            Err(text) => Err(TranscodeError::Malformed(text)),
        }
    }
}

/// A synchronous transcoder: the body, and where it takes memory from; returns what it wrote
/// and how much it took.
pub type Transcoder = fn(&[u8], &mut dyn Allowance) -> Result<(Transcoded, usize), TranscodeError>;

/// Runs `transcoder` on `body` with no limit, for callers that hold the body whole anyway (tests,
/// fuzzing); an error names where the body is malformed.
pub fn whole(body: &[u8], transcoder: Transcoder) -> Result<Transcoded, String> {
    match transcoder(body, &mut Unlimited) {
        Ok((transcoded, _)) => Ok(transcoded),
        Err(TranscodeError::Malformed(text)) => Err(text),
        Err(TranscodeError::Stopped) => unreachable!("an unlimited allowance never runs out"),
    }
}

/// Runs `transcoder` on `body` on a blocking thread (it is CPU work, and it waits for the meter
/// while the request's task waits on the budget); each time it asks for memory, `meter` is
/// charged first. What it took beyond what it holds at the end is given back.
pub async fn charged(
    body: Bytes,
    meter: &mut Meter<'_>,
    transcoder: Transcoder,
) -> Result<Transcoded, IngestError> {
    let (asks, mut asked) = mpsc::channel::<(usize, oneshot::Sender<bool>)>(1);
    let work = tokio::task::spawn_blocking(move || {
        let mut allowance = Bridge { asks };
        transcoder(&body, &mut allowance)
    });
    let mut refusal = None;
    while let Some((bytes, answer)) = asked.recv().await {
        let charged = meter.charge(bytes).await;
        let _ = answer.send(charged.is_ok());
        if let Err(err) = charged {
            refusal = Some(err);
        }
    }
    let outcome = match work.await {
        Ok(outcome) => outcome,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        Err(_) => return Err(IngestError::ShuttingDown),
    };
    match outcome {
        Ok((transcoded, granted)) => {
            let held = transcoded.protobuf.len() + transcoded.refused.held_bytes();
            meter.release(granted.saturating_sub(held));
            Ok(transcoded)
        }
        Err(TranscodeError::Malformed(text)) => Err(IngestError::Malformed(text)),
        Err(TranscodeError::Stopped) => Err(refusal.unwrap_or(IngestError::ShuttingDown)),
    }
}

/// The blocking thread's side of [`charged`]: each ask waits for the meter's answer.
struct Bridge {
    asks: mpsc::Sender<(usize, oneshot::Sender<bool>)>,
}

impl Allowance for Bridge {
    fn take(&mut self, bytes: usize) -> Result<(), Stopped> {
        let (answer, answered) = oneshot::channel();
        self.asks
            .blocking_send((bytes, answer))
            .map_err(|_| Stopped)?;
        match answered.blocking_recv() {
            Ok(true) => Ok(()),
            _ => Err(Stopped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Error = serde_json::Error;

    /// An allowance that grants up to `left` bytes, counting what was asked.
    struct Limited {
        left: usize,
        asks: usize,
    }

    impl Allowance for Limited {
        fn take(&mut self, bytes: usize) -> Result<(), Stopped> {
            self.asks += 1;
            self.left = self.left.checked_sub(bytes).ok_or(Stopped)?;
            Ok(())
        }
    }

    #[test]
    fn nested_messages_are_written_in_place_with_their_exact_length() {
        for len in [0, 1, 127, 128, 16_383, 16_384, 300_000] {
            let mut unlimited = Unlimited;
            let mut out = Writer::new(&mut unlimited);
            let outer = out.begin::<Error>(1).unwrap();
            let inner = out.begin::<Error>(2).unwrap();
            out.put_bytes::<Error>(3, &vec![7; len]).unwrap();
            out.end(inner);
            let gone = out.begin::<Error>(4).unwrap();
            out.cancel(gone);
            out.end(outer);
            let (transcoded, _) = out.finish(Ok(())).unwrap();
            let mut expected = Vec::new();
            crate::wire::fields::put_field(&mut expected, 3, &vec![7; len]);
            let mut inner = Vec::new();
            crate::wire::fields::put_field(&mut inner, 2, &expected);
            let mut outer = Vec::new();
            crate::wire::fields::put_field(&mut outer, 1, &inner);
            assert_eq!(transcoded.protobuf, outer, "{len}");
        }
    }

    #[test]
    fn every_byte_is_taken_from_the_allowance_before_it_is_held_and_it_stops_when_refused() {
        let mut allowance = Limited {
            left: 10 * STEP,
            asks: 0,
        };
        let mut out = Writer::new(&mut allowance);
        let chunk = vec![1; 1000];
        let mut written = 0;
        let stopped = loop {
            match out.put_bytes::<Error>(2, &chunk) {
                Ok(()) => written += 1,
                Err(err) => break err,
            }
            assert!(out.protobuf.len() + out.refused.held_bytes() <= out.granted);
        };
        assert!(written > 600 && written <= 10 * STEP / 1000, "{written}");
        assert!(out.put_bytes::<Error>(2, b"x").is_err(), "it stays stopped");
        assert!(matches!(
            out.finish(Err(stopped.to_string())),
            Err(TranscodeError::Stopped)
        ));
        assert_eq!(allowance.asks, 11, "a step at a time, then the refusal");
    }
}
