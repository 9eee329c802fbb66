//! tink-agent
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    eprintln!(
        "tink-agent {}: the command stream is not wired yet",
        env!("CARGO_PKG_VERSION")
    );
    std::process::ExitCode::from(2)
}
