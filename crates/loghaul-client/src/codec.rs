//! A gRPC codec that sends protobuf messages encoded beforehand, so a chunk is encoded once and
//! sent again byte for byte when it is retried.

use std::marker::PhantomData;

use bytes::{BufMut, Bytes};
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic::Status;

/// Sends already-encoded protobuf bytes and decodes the response `R` with prost.
pub struct PreEncoded<R>(PhantomData<R>);

impl<R> Default for PreEncoded<R> {
    fn default() -> Self {
        PreEncoded(PhantomData)
    }
}

impl<R: prost::Message + Default + Send + 'static> Codec for PreEncoded<R> {
    type Encode = Bytes;
    type Decode = R;
    type Encoder = BytesEncoder;
    type Decoder = tonic_prost::ProstDecoder<R>;

    fn encoder(&mut self) -> Self::Encoder {
        BytesEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::<R>::default()
    }
}

/// Writes the bytes as they are.
pub struct BytesEncoder;

impl Encoder for BytesEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}
