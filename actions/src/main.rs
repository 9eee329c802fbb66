//! tink-actions: Tinkerbell's hub actions (image2disk, oci2disk, qemuimg2disk, archive2disk,
//! writefile, cexec, kexec, grub2disk) as one static
//! multi-call binary. The action is the name the binary was called by (`image2disk`, through a
//! symbolic link in the image) or its first argument (`tink-actions image2disk`); settings come
//! from the hub's environment variables (docs/actions.md). On failure the action writes the
//! agent's `/tinkerbell/failure-reason` and `failure-message` and exits non-zero.

mod archive2disk;
mod cexec;
mod common;
mod grub2disk;
mod grubcfg;
mod http;
mod image2disk;
mod kexec;
mod oci2disk;
mod qemu;
mod qemuimg2disk;
mod sys;
mod writefile;

use common::{ActionError, Env, Log};

const ACTIONS: [&str; 8] = [
    "image2disk",
    "oci2disk",
    "qemuimg2disk",
    "archive2disk",
    "writefile",
    "cexec",
    "kexec",
    "grub2disk",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let argv0 = args
        .first()
        .map(|a| a.rsplit('/').next().unwrap_or(a).to_owned())
        .unwrap_or_default();
    let name = if ACTIONS.contains(&argv0.as_str()) {
        argv0
    } else if let Some(first) = args.get(1) {
        first.clone()
    } else {
        String::new()
    };
    if name == "--version" {
        println!("tink-actions {}", env!("CARGO_PKG_VERSION"));
        return;
    }
    let env = Env::from_process();
    let action: &'static str = match ACTIONS.iter().find(|a| **a == name) {
        Some(a) => a,
        None => {
            eprintln!(
                "usage: tink-actions <{}> (or call it by one of those names); settings come from the environment",
                ACTIONS.join("|")
            );
            std::process::exit(2);
        }
    };
    let log = Log {
        text: env.bool("TEXT_LOGGING", false).unwrap_or(false),
        action,
    };
    let result: Result<(), ActionError> = match action {
        "image2disk" => image2disk::run(&env, &log),
        "archive2disk" => archive2disk::run(&env, &log),
        "writefile" => writefile::run(&env, &log),
        "cexec" => cexec::run(&env, &log),
        "oci2disk" => oci2disk::run(&env, &log),
        "qemuimg2disk" => qemuimg2disk::run(&env, &log),
        "grub2disk" => grub2disk::run(&env, &log),
        _ => kexec::run(&env, &log),
    };
    if let Err(e) = result {
        log.error(
            &e.message,
            &[
                ("reason", e.reason.into()),
                ("exit_code", e.exit_code.into()),
            ],
        );
        common::write_failure(&env, &log, &e);
        std::process::exit(if e.exit_code == 0 { 1 } else { e.exit_code });
    }
}
