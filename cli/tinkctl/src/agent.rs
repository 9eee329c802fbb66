//! `tinkctl agent reset <agent id>`: ends an agent's session, so a re-installed machine (whose
//! new agent does not have the old session token) is admitted by the servers again, and clears
//! the record of its exchanged boot secret, so an agent restarted in the same boot after its
//! session ended (the one case the single-use boot secret costs) may exchange it once more.

use anyhow::Context as _;
use clap::{Args, Subcommand};

/// Agent commands.
#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// End an agent's session: its presence entry (holding the session token's hash) is
    /// deleted, and the next stream of that agent id gets a new token. The stream the old
    /// session holds keeps running until it ends; its events are refused from then on. For a
    /// machine with a boot secret, the record of the agent's exchanged secret is cleared too:
    /// the value of its current boot is accepted once more (whoever presents it first gets the
    /// session, so reset only a machine whose own agent is waiting).
    Reset(ResetArgs),
}

/// Arguments of `agent reset`.
#[derive(Args, Debug)]
pub struct ResetArgs {
    /// The agent id (the machine's MAC address as its agent presents it).
    pub agent_id: String,
    /// NATS server URL(s).
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    #[command(flatten)]
    pub nats: crate::logs::NatsLogin,
}

impl ResetArgs {
    fn nats_auth(&self) -> tink_bus::NatsAuth {
        self.nats.auth()
    }
}

/// Runs an agent command.
pub fn run(cmd: AgentCommand) -> anyhow::Result<()> {
    let AgentCommand::Reset(args) = cmd;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(reset(&args))
}

async fn reset(args: &ResetArgs) -> anyhow::Result<()> {
    // The operator may type the MAC in any spelling; the session is the canonical id's.
    let agent = tink_api::AgentId::normalize(&args.agent_id)
        .with_context(|| format!("agent id {:?}", args.agent_id))?;
    let key = tink_bus::agent_token(agent.as_str())
        .with_context(|| format!("agent id {:?}", args.agent_id))?;
    let client = tink_bus::connect(&args.nats_url, &args.nats_auth(), || {
        async_nats::ConnectOptions::new().name("tinkctl agent reset")
    })
    .await
    .with_context(|| format!("cannot connect to NATS at {}", args.nats_url))?;
    let js = async_nats::jetstream::new(client);
    let bucket = js
        .get_key_value(tink_bus::PRESENCE_BUCKET)
        .await
        .context("cannot open the presence bucket (is the stack running against this NATS?)")?;
    let existed = bucket
        .entry(&key)
        .await
        .context("cannot read the agent's presence")?
        .is_some_and(|e| e.operation == async_nats::jetstream::kv::Operation::Put);
    bucket
        .purge(&key)
        .await
        .context("cannot delete the agent's presence")?;
    if existed {
        println!(
            "agent {}: session reset; its next stream gets a new token",
            args.agent_id
        );
    } else {
        println!("agent {}: had no live session", args.agent_id);
    }
    let used = js
        .get_key_value(tink_bus::AGENT_SECRETS_USED_BUCKET)
        .await
        .context("cannot open the exchanged agent secrets bucket")?;
    let exchanged = used
        .entry(&key)
        .await
        .context("cannot read the agent's exchanged boot secret")?
        .is_some_and(|e| e.operation == async_nats::jetstream::kv::Operation::Put);
    if exchanged {
        used.purge(&key)
            .await
            .context("cannot clear the agent's exchanged boot secret")?;
        println!(
            "agent {}: its boot secret may be exchanged once more (the machine's current boot's)",
            args.agent_id
        );
    }
    Ok(())
}
