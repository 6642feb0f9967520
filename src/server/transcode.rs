//! What the JSON transcoders (OTLP/JSON, Loki JSON) share: the protobuf they write, every byte
//! of it taken from an [`Allowance`] before it is written; the records they refuse, kept compact
//! ([`Refused`]); and [`charged`], which runs one on a blocking thread and charges the request's
//! meter each time it asks for more.
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
use crate::model::reject::RejectionCounts;
use crate::pipeline::Meter;
use crate::server::rejections::{capped_reason, MAX_LISTED_REJECTIONS, MAX_REASON_CHARS};
use crate::server::validate::{Invalid, RejectReason};

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

/// The records a transcoder refused, by request index: all of them counted, by reason, and
/// marked one bit each (what the pipeline needs to number the others); the first
/// [`MAX_LISTED_REJECTIONS`] kept with their reason, cut to a few hundred characters.
///
/// The reply names no more than that: rejections are listed in request order, and the
/// transcoder's come before any other of a higher index, so a reason past the
/// `MAX_LISTED_REJECTIONS`th could never be shown.
#[derive(Debug, Default)]
pub struct Refused {
    /// Bit `i % 64` of word `i / 64` is set when record `i` was refused.
    marks: Vec<u64>,
    count: u64,
    by_reason: RejectionCounts,
    detailed: Vec<(u64, Invalid)>,
}

/// What one kept reason may hold: the text at its longest in UTF-8, and its place in the list.
const DETAIL_BYTES: usize = 4 * MAX_REASON_CHARS + std::mem::size_of::<(u64, Invalid)>();

impl Refused {
    /// Records refused.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether record `index` was refused.
    pub fn contains(&self, index: u64) -> bool {
        let (word, bit) = Self::place(index);
        self.marks
            .get(word)
            .is_some_and(|marks| marks & (1 << bit) != 0)
    }

    /// The refused records' indexes, in order.
    pub fn indexes(&self) -> impl Iterator<Item = u64> + '_ {
        self.marks.iter().enumerate().flat_map(|(word, &marks)| {
            (0..64)
                .filter(move |bit| marks & (1 << bit) != 0)
                .map(move |bit| word as u64 * 64 + bit)
        })
    }

    /// The first refused records with their reason, in order.
    pub fn detailed(&self) -> &[(u64, Invalid)] {
        &self.detailed
    }

    /// How many records from `index` on were refused in a row.
    pub fn run_at(&self, index: u64) -> u64 {
        let mut run = 0;
        loop {
            let (word, bit) = Self::place(index + run);
            let Some(&marks) = self.marks.get(word) else {
                return run;
            };
            let ones = u64::from((marks >> bit).trailing_ones()).min(64 - bit as u64);
            run += ones;
            if ones < 64 - bit as u64 {
                return run;
            }
        }
    }

    /// Refused records counted by reason.
    pub fn by_reason(&self) -> RejectionCounts {
        self.by_reason
    }

    /// Bytes held.
    pub fn held_bytes(&self) -> usize {
        self.marks.capacity() * 8 + self.detailed.capacity() * DETAIL_BYTES
    }

    /// Bytes that refusing record `index` would add to what is held, at most.
    fn growth_for(&self, index: u64) -> usize {
        let words = Self::place(index).0 + 1;
        let marks = if words > self.marks.capacity() {
            (Self::capacity_for(words, self.marks.capacity()) - self.marks.capacity()) * 8
        } else {
            0
        };
        let detail = if self.detailed.len() < MAX_LISTED_REJECTIONS
            && self.detailed.len() == self.detailed.capacity()
        {
            MAX_LISTED_REJECTIONS * DETAIL_BYTES
        } else {
            0
        };
        marks + detail
    }

    /// Counts record `index` refused for `reason`, later than any refused before it; `detail`
    /// is written out, up to its first characters, only when the reason is kept.
    pub fn add(&mut self, index: u64, reason: RejectReason, detail: &dyn fmt::Display) {
        let (word, bit) = Self::place(index);
        if word >= self.marks.capacity() {
            let capacity = Self::capacity_for(word + 1, self.marks.capacity());
            self.marks.reserve_exact(capacity - self.marks.len());
        }
        if word >= self.marks.len() {
            self.marks.resize(word + 1, 0);
        }
        self.marks[word] |= 1 << bit;
        self.count += 1;
        self.by_reason.add(reason);
        if self.detailed.len() < MAX_LISTED_REJECTIONS {
            self.detailed.reserve_exact(MAX_LISTED_REJECTIONS);
            self.detailed
                .push((index, Invalid::new(reason, capped_reason(detail))));
        }
    }

    fn place(index: u64) -> (usize, u32) {
        ((index / 64) as usize, (index % 64) as u32)
    }

    /// The bitmap doubles, as a `Vec` would, but by a size known before it grows.
    fn capacity_for(words: usize, capacity: usize) -> usize {
        words.max(capacity * 2).max(16)
    }
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
        crate::server::fields::put_field(&mut self.protobuf, number, bytes);
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
            crate::server::fields::put_field(&mut expected, 3, &vec![7; len]);
            let mut inner = Vec::new();
            crate::server::fields::put_field(&mut inner, 2, &expected);
            let mut outer = Vec::new();
            crate::server::fields::put_field(&mut outer, 1, &inner);
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

    #[test]
    fn refused_records_are_one_bit_each_and_only_the_first_keep_a_reason() {
        let mut refused = Refused::default();
        let long = "z".repeat(10_000);
        let mut indexes = Vec::new();
        for index in (3..100_000u64).filter(|index| index % 7 != 0) {
            refused.add(index, RejectReason::MalformedRecord, &long);
            indexes.push(index);
        }
        assert_eq!(refused.count(), indexes.len() as u64);
        assert!(refused.indexes().eq(indexes.iter().copied()));
        assert!(!refused.contains(7) && refused.contains(8) && !refused.contains(100_000));
        assert_eq!(refused.run_at(0), 0);
        assert_eq!(refused.run_at(3), 4);
        assert_eq!(refused.run_at(8), 6);
        assert_eq!(refused.detailed().len(), MAX_LISTED_REJECTIONS);
        assert_eq!(refused.detailed()[0].0, 3);
        for (_, invalid) in refused.detailed() {
            assert_eq!(invalid.detail.chars().count(), MAX_REASON_CHARS);
        }
        assert!(refused.held_bytes() < 64 * 1024, "{}", refused.held_bytes());
        let counts: Vec<_> = refused.by_reason().nonzero().collect();
        assert_eq!(
            counts,
            [(RejectReason::MalformedRecord, indexes.len() as u64)]
        );

        let mut run = Refused::default();
        for index in 60..200 {
            run.add(index, RejectReason::InvalidTimestamp, &"t");
        }
        assert_eq!(run.run_at(60), 140);
        assert_eq!(run.run_at(64), 136);
        assert_eq!(run.run_at(199), 1);
        assert_eq!(run.run_at(200), 0);
    }
}
