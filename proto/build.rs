//! Generates the workflow v2 client and server with the vendored `protoc` (no system protoc).

use std::error::Error;

fn main() -> Result<(), Box<dyn Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let well_known = protoc_bin_vendored::include_path()?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Small initial per-call buffers (see src/codec.rs).
        .codec_path("crate::codec::LeanCodec")
        .compile_with_config(
            config,
            &["workflow/v2/workflow.proto".into()],
            &[std::path::PathBuf::from("."), well_known],
        )?;
    println!("cargo:rerun-if-changed=workflow/v2/workflow.proto");
    Ok(())
}
