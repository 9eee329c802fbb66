//! The protobuf codec used by the generated client and server.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial encode/decode buffer per call. tonic's default is 8 KiB per call, allocated when the
/// call starts; a server holds one long-lived `GetWorkflows` stream per agent, mostly idle, so
/// 8 KiB each would dominate its memory. 256 bytes hold the frame header and a small message;
/// a command larger than that grows the buffer once (1 KiB before: 0.8 KiB more per idle agent,
/// BENCHMARKS.md, issue 33).
pub const BUFFER_SIZE: usize = 256;

/// Above this many buffered bytes a stream yields to let the transport send.
pub const YIELD_THRESHOLD: usize = 32 * 1024;

/// `tonic_prost::ProstCodec` with [`BUFFER_SIZE`] initial buffers.
#[derive(Debug, Clone)]
pub struct LeanCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        LeanCodec { _pd: PhantomData }
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD)
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
