//! `tinkctl agent enroll <agent id>`: reports a machine's inventory without credentials, as the
//! agent of a machine no Hardware names does to enroll (issue 30): for a machine whose agent
//! cannot run, from an inventory collected on it with `tink-inventory`, or to see from a shell
//! what a server answers. Servers take it only with `--enrollment`, and only for an agent id that
//! no Hardware names; for any other id they refuse it and nothing changes.
//!
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
    /// Enroll a machine: report its inventory (collected under --root, default `/`, or read
    /// from --inventory, the JSON `tink-inventory` prints) without credentials, as an unknown
    /// machine's agent does. Taken only by servers with --enrollment and only for an agent id
    /// no Hardware names: the controller then creates its discovered Hardware, which gets no
    /// Workflow until approved.
    Enroll(EnrollArgs),
}

/// Arguments of `agent enroll`.
#[derive(Args, Debug)]
pub struct EnrollArgs {
    /// The agent id (the machine's MAC address).
    pub agent_id: String,
    /// The machine to read (its `/proc`, `/sys` and SMBIOS tables under this folder).
    #[arg(long, default_value = "/", conflicts_with = "inventory")]
    pub root: std::path::PathBuf,
    /// An inventory already collected (JSON, as `tink-inventory` prints it).
    #[arg(long)]
    pub inventory: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub server: crate::logs::ServerArgs,
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
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match cmd {
        AgentCommand::Reset(args) => rt.block_on(reset(&args)),
        AgentCommand::Enroll(args) => rt.block_on(enroll(&args)),
    }
}

async fn enroll(args: &EnrollArgs) -> anyhow::Result<()> {
    let agent = tink_api::AgentId::normalize(&args.agent_id)
        .with_context(|| format!("agent id {:?}", args.agent_id))?;
    let json = match &args.inventory {
        Some(path) => {
            let bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let inventory = tink_inventory::Inventory::from_json(&bytes)
                .with_context(|| format!("{}: not a valid inventory", path.display()))?;
            inventory
                .to_json()
                .context("cannot serialize the inventory")?
        }
        None => {
            let inventory = tink_inventory::collect(&args.root);
            for warning in &inventory.warnings {
                eprintln!("warning: {warning}");
            }
            inventory
                .to_json()
                .context("cannot serialize the inventory")?
        }
    };
    let inventory = String::from_utf8(json).context("the inventory is not UTF-8")?;
    let server = args
        .server
        .server
        .as_deref()
        .and_then(|s| s.split(',').map(str::trim).find(|s| !s.is_empty()))
        .context("--server is empty: expected HOST:PORT")?;
    let tls = crate::logs::tls_config(&args.server)?;
    let channel = crate::logs::endpoint(server, tls.as_ref())?
        .connect()
        .await
        .with_context(|| format!("cannot connect to the server {server}"))?;
    let mut client = tink_bus::proto::workflow_service_client::WorkflowServiceClient::new(channel);
    let response = client
        .report_inventory(tink_bus::proto::ReportInventoryRequest {
            agent_id: agent.as_str().to_string(),
            inventory,
            request_id: String::new(),
        })
        .await
        .map_err(|s| {
            anyhow::anyhow!(
                "the server refused the enrollment of {agent}: {} ({:?})",
                s.message(),
                s.code()
            )
        })?
        .into_inner();
    if response.enrolled {
        println!(
            "{agent}: enrollment stored{}",
            if response.duplicate {
                " (the same as before)"
            } else {
                ""
            }
        );
        Ok(())
    } else {
        anyhow::bail!("{agent}: the server stored the inventory, but not as an enrollment")
    }
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
