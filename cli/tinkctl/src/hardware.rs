//! `tinkctl hardware logs NAME [-f]`: what a machine sent to tink-netboot's syslog receiver
//! (its kernel log and its OSIE's init messages, from the moment it had an address), so a boot
//! that fails before the agent starts can be followed.
//!
//! The lines are read from NATS JetStream (stream `TINK_SYSLOG`, subject
//! `tink.syslog.<token of namespace/name>`, [`tink_bus::read_syslog`]) with the NATS login of
//! `workflow logs --nats-url` (`tink-admin`, which the dev stack's env file sets). The
//! Hardware is looked up first, so a mistyped name is an error rather than an empty log.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use kube::api::Api;
use tink_api::v1alpha2::Hardware;

use crate::kubeconfig::KubeArgs;
use crate::logs::NatsLogin;

/// Hardware commands.
#[derive(Subcommand, Debug)]
pub enum HardwareCommand {
    /// Print a machine's boot log received by syslog (time received, severity, program,
    /// message), oldest first; `-f` keeps printing new lines.
    Logs(HardwareLogsArgs),
}

/// Arguments of `hardware logs`.
#[derive(Args, Debug, Clone)]
pub struct HardwareLogsArgs {
    /// The Hardware's name.
    pub name: String,
    /// The Hardware's namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Keep printing new lines (until interrupted).
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines stored.
    #[arg(long)]
    pub tail: Option<usize>,
    /// Print each line as stored (JSON: also the facility, host name, process id, source
    /// address and the sender's own timestamp).
    #[arg(long)]
    pub json: bool,
    /// NATS server URL(s).
    #[arg(long, env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    #[command(flatten)]
    pub nats: NatsLogin,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Runs a hardware command.
pub fn run(cmd: HardwareCommand) -> anyhow::Result<()> {
    let HardwareCommand::Logs(args) = cmd;
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(logs(&args))
}

async fn logs(args: &HardwareLogsArgs) -> anyhow::Result<()> {
    let client = args.kube.client().await?;
    let api: Api<Hardware> = Api::namespaced(client, &args.namespace);
    if api
        .get_opt(&args.name)
        .await
        .with_context(|| format!("reading Hardware {}/{}", args.namespace, args.name))?
        .is_none()
    {
        anyhow::bail!(
            "no Hardware {:?} in namespace {:?}",
            args.name,
            args.namespace
        );
    }
    let nats = tink_bus::connect(&args.nats_url, &args.nats.auth(), || {
        async_nats::ConnectOptions::new().name("tinkctl hardware logs")
    })
    .await
    .with_context(|| format!("cannot connect to NATS at {}", args.nats_url))?;
    let js = async_nats::jetstream::new(nats);
    let out = std::cell::RefCell::new(std::io::stdout().lock());
    let failed = std::cell::RefCell::new(None);
    let emit = |line: tink_bus::SyslogLine| {
        let text = if args.json {
            String::from_utf8_lossy(&line.to_bytes()).into_owned()
        } else {
            line.display_line()
        };
        let mut out = out.borrow_mut();
        let result = std::io::Write::write_all(&mut *out, text.as_bytes())
            .and_then(|()| std::io::Write::write_all(&mut *out, b"\n"))
            .and_then(|()| {
                if args.follow {
                    std::io::Write::flush(&mut *out)
                } else {
                    Ok(())
                }
            });
        let ok = result.is_ok();
        if let Err(e) = result {
            *failed.borrow_mut() = Some(e);
        }
        std::future::ready(ok)
    };
    let read = tink_bus::SyslogRead {
        last: args.tail,
        follow: args.follow,
    };
    let summary = match tink_bus::read_syslog(&js, &args.namespace, &args.name, read, emit).await {
        Ok(summary) => summary,
        Err(tink_bus::SyslogReadError::NoStream) if !args.follow => {
            eprintln!(
                "no syslog lines: stream {} does not exist (no tink-netboot with --syslog-addr has run on this NATS)",
                tink_bus::SYSLOG_STREAM
            );
            return Ok(());
        }
        Err(e) => return Err(e).context("reading the machine's syslog lines"),
    };
    if let Some(e) = failed.into_inner() {
        // A closed pipe (`| head`) ends the command quietly.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(());
        }
        return Err(e).context("writing to stdout");
    }
    std::io::Write::flush(&mut *out.borrow_mut())?;
    if summary.malformed > 0 {
        eprintln!(
            "skipped {} stored messages that are not lines",
            summary.malformed
        );
    }
    if summary.lines == 0 && !args.follow {
        eprintln!(
            "no syslog lines for Hardware {}/{} (a machine's lines arrive once its OSIE has an address and syslog_host is set)",
            args.namespace, args.name
        );
    }
    Ok(())
}
