//! Decompression of request bodies and gRPC messages under the memory budget: every step takes
//! budget before it inflates, so a small body that inflates to a large one (a compression bomb) is
//! charged, and stopped at the size limit, before it is in memory.

use std::io::Read;

use bytes::Bytes;

use crate::error::IngestError;
use crate::pipeline::Meter;

/// Decompressed bytes produced between two looks at the budget.
const INFLATE_STEP: usize = 64 * 1024;

/// How a body or message is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// gzip (RFC 1952).
    Gzip,
    /// zlib-wrapped deflate (RFC 1950), what HTTP calls `deflate`.
    Deflate,
    /// Zstandard.
    Zstd,
    /// Snappy's block format, which the Loki push API uses for its protobuf bodies.
    Snappy,
}

impl Compression {
    /// The name clients use for it in `Content-Encoding` and `grpc-encoding`.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::Deflate => "deflate",
            Compression::Zstd => "zstd",
            Compression::Snappy => "snappy",
        }
    }
}

/// Decompresses `data`, charging `meter` for every byte produced, and refuses it once it
/// inflates past `max_bytes`.
pub(crate) async fn inflate(
    data: &[u8],
    compression: Compression,
    max_bytes: usize,
    meter: &mut Meter<'_>,
) -> Result<Bytes, IngestError> {
    let broken = |err: &dyn std::fmt::Display| {
        IngestError::Malformed(format!(
            "the {} data does not decompress: {err}",
            compression.as_str()
        ))
    };
    let too_large = || IngestError::RequestTooLarge {
        detail: format!("{} data that inflates past the limit", compression.as_str()),
        limit: max_bytes as u64,
    };
    let mut decoder: Box<dyn Read + Send + '_> = match compression {
        Compression::Gzip => Box::new(flate2::read::GzDecoder::new(data)),
        Compression::Deflate => Box::new(flate2::read::ZlibDecoder::new(data)),
        Compression::Zstd => {
            Box::new(zstd::stream::read::Decoder::with_buffer(data).map_err(|e| broken(&e))?)
        }
        Compression::Snappy => {
            // The block format states its decompressed length up front: refuse before inflating.
            let len = snap::raw::decompress_len(data).map_err(|e| broken(&e))?;
            if len > max_bytes {
                return Err(too_large());
            }
            meter.charge(len).await?;
            let out = snap::raw::Decoder::new()
                .decompress_vec(data)
                .map_err(|e| broken(&e))?;
            return Ok(Bytes::from(out));
        }
    };
    let mut out = Vec::new();
    loop {
        let start = out.len();
        if start > max_bytes {
            return Err(too_large());
        }
        let step = INFLATE_STEP.min(max_bytes + 1 - start);
        meter.charge(step).await?;
        out.resize(start + step, 0);
        let read = decoder.read(&mut out[start..]).map_err(|e| broken(&e))?;
        out.truncate(start + read);
        meter.release(step - read);
        if read == 0 {
            return Ok(Bytes::from(out));
        }
    }
}
