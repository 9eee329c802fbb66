//! tinkctl: operator command line for tinkerbell-rs.
#![forbid(unsafe_code)]

mod crds;

use clap::{Parser, Subcommand};

/// Operator command line for tinkerbell-rs.
#[derive(Parser, Debug)]
#[command(name = "tinkctl", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print (or write) the tinkerbell.org CustomResourceDefinitions generated from the API types.
    Crds(crds::CrdsArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds(args) => crds::run(&args, &mut std::io::stdout().lock()),
    }
}
