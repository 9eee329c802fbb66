//! `tink-inventory [--root DIR] [--attributes]`: prints what this machine (or the tree under
//! DIR) reports as inventory, as JSON; `--attributes` prints Tinkerbell's `attributes` shape.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = concat!(
    "usage: tink-inventory [--root DIR] [--attributes]\n",
    "  --root DIR     read /proc and /sys under DIR instead of / (default /)\n",
    "  --attributes   print Tinkerbell's Hardware status attributes (inBand) instead",
);

fn main() -> ExitCode {
    let mut root = PathBuf::from("/");
    let mut attributes = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--root" => match args.next() {
                Some(dir) => root = PathBuf::from(dir),
                None => {
                    eprintln!("--root needs a directory\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "--attributes" => attributes = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let inventory = tink_inventory::collect(&root);
    if let Err(e) = inventory.validate() {
        eprintln!("tink-inventory: the collected inventory does not validate: {e}");
        return ExitCode::FAILURE;
    }
    let out = if attributes {
        serde_json::to_string_pretty(&inventory.to_attributes())
    } else {
        serde_json::to_string_pretty(&inventory)
    };
    let json = match out {
        Ok(json) => json,
        Err(e) => {
            eprintln!("tink-inventory: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A closed pipe (`| head`) is the reader's choice, not an error worth a panic.
    match writeln!(std::io::stdout().lock(), "{json}") {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tink-inventory: stdout: {e}");
            ExitCode::FAILURE
        }
    }
}
