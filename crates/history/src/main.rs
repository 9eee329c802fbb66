//! `tink-history check FILE`: reads a fault run's history (JSON lines, see RELIABILITY.md) and
//! prints the checker's report; exits 1 when something that must never happen happened, 2 when
//! the history cannot be read. `tink-history faults FILE` prints the per-fault table (Markdown):
//! for each fault kind, the Workflows in flight during it and how they ended.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(version, about = "Checks the history of a fault run")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Prints executions twice, wrong end states, acknowledged events lost and overlapping
    /// terms, with the run's seed.
    Check {
        /// The history: one JSON record a line.
        file: PathBuf,
    },
    /// Prints, for each fault kind, how often it was injected, the Workflows in flight while it
    /// lasted, and how many of those ended right, ran twice or lost an acknowledged event.
    Faults {
        /// The history: one JSON record a line.
        file: PathBuf,
    },
}

fn load(file: &std::path::Path) -> Result<Vec<tink_history::Record>, ExitCode> {
    std::fs::File::open(file)
        .map_err(tink_history::ReadError::from)
        .and_then(|f| tink_history::read(std::io::BufReader::new(f)))
        .map_err(|e| {
            eprintln!("error: {}: {e}", file.display());
            ExitCode::from(2)
        })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Faults { file } => match load(&file) {
            Ok(records) => {
                let report = tink_history::check(&records);
                if let Some(seed) = report.seed {
                    println!("seed {seed}");
                }
                print!(
                    "{}",
                    tink_history::fault_table_markdown(&tink_history::fault_table(&records))
                );
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Check { file } => {
            let records = match load(&file) {
                Ok(records) => records,
                Err(code) => return code,
            };
            let report = tink_history::check(&records);
            print!("{report}");
            if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
    }
}
