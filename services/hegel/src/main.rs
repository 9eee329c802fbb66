//! hegel: not implemented yet (see the project's open issues).
#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    eprintln!(
        "hegel {}: not implemented yet; see the project's open issues",
        env!("CARGO_PKG_VERSION")
    );
    std::process::ExitCode::from(2)
}
