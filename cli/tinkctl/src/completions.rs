//! `tinkctl completions SHELL`: shell completion scripts (clap_complete).

use std::io::Write;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

/// Arguments of `tinkctl completions`.
#[derive(Args, Debug, Clone)]
pub struct CompletionsArgs {
    /// The shell, e.g. `bash` (then: `tinkctl completions bash > /etc/bash_completion.d/tinkctl`).
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Writes the completion script for `args.shell`.
pub fn run(args: &CompletionsArgs, out: &mut impl Write) -> anyhow::Result<()> {
    let mut cmd = crate::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "tinkctl", out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_completion_knows_the_subcommands() {
        let mut out = Vec::new();
        run(&CompletionsArgs { shell: Shell::Bash }, &mut out).expect("completions");
        let text = String::from_utf8(out).expect("utf8");
        for word in [
            "dev", "demo", "workflow", "template", "crds", "status", "watch", "render",
        ] {
            assert!(
                text.contains(word),
                "{word} missing from the bash completion"
            );
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        crate::Cli::command().debug_assert();
    }
}
