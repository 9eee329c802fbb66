//! The protobuf codec used by the generated client and server.

use std::marker::PhantomData;

use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial encode/decode buffer per call. tonic's default is 8 KiB per call, allocated when the
/// call starts; a server holds one long-lived `GetWorkflows` stream per agent, whose commands
/// are a few hundred bytes, so 8 KiB each would dominate its memory. Buffers still grow for
/// larger messages.
pub const BUFFER_SIZE: usize = 1024;

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
