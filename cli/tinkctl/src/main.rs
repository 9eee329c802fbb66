//! tinkctl: operator command line for tinkerbell-rs.
#![forbid(unsafe_code)]

mod agent;
mod apply;
mod bmc;
mod completions;
mod crds;
mod demo;
mod dev;
mod hardware;
mod kubeconfig;
mod logs;
mod migrate;
mod osie;
mod render;
mod rollout;
mod watch;

use clap::{Parser, Subcommand};

/// Operator command line for tinkerbell-rs.
#[derive(Parser, Debug)]
#[command(name = "tinkctl", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

// One variant and one dispatch line per subcommand, in the same order, so branches that add a
// subcommand merge line by line.
#[derive(Subcommand, Debug)]
enum Command {
    /// Print (or write) the tinkerbell.org CustomResourceDefinitions generated from the API types.
    Crds(crds::CrdsArgs),
    /// The local development stack: every service as its own process on loopback.
    #[command(subcommand)]
    Dev(dev::DevCommand),
    /// Apply a sample Hardware, OSIE, Template and Workflow and follow the Workflow to its end.
    Demo(demo::DemoArgs),
    /// Workflow commands.
    #[command(subcommand)]
    Workflow(watch::WorkflowCommand),
    /// Template commands.
    #[command(subcommand)]
    Template(render::TemplateCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Migrate v1alpha1 objects to v1alpha2: YAML files offline, or every stored object in-cluster.
    Migrate(migrate::MigrateArgs),
    /// Agent commands (`agent reset` lets a re-installed machine's agent in).
    #[command(subcommand)]
    Agent(agent::AgentCommand),
    /// BMC commands: power and one-time boot of a Machine through a bmc.tinkerbell.org Job,
    /// followed to its end.
    #[command(subcommand)]
    Bmc(bmc::BmcCommand),
    /// Hardware commands: `logs` (a machine's boot log received by syslog), `approve` (a
    /// discovered machine), `list`.
    #[command(subcommand)]
    Hardware(hardware::HardwareCommand),
    /// Rollout commands: `status` of a WorkflowSet (-w follows it until it completes or halts).
    #[command(subcommand)]
    Rollout(rollout::RolloutCommand),
    /// OSIE commands: `release` (a versioned release folder with checksums from
    /// osie/build.sh's output).
    #[command(subcommand)]
    Osie(osie::OsieCommand),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds(args) => crds::run(&args, &mut std::io::stdout().lock()),
        Command::Dev(cmd) => dev::run(cmd),
        Command::Demo(args) => demo::run(args),
        Command::Workflow(cmd) => watch::run(cmd),
        Command::Template(cmd) => render::run(cmd),
        Command::Completions(args) => completions::run(&args, &mut std::io::stdout().lock()),
        Command::Migrate(args) => migrate::run(&args),
        Command::Agent(cmd) => agent::run(cmd),
        Command::Bmc(cmd) => bmc::run(cmd),
        Command::Hardware(cmd) => hardware::run(cmd),
        Command::Rollout(cmd) => rollout::run(cmd),
        Command::Osie(cmd) => osie::run(cmd),
    }
}
