//! `tinkctl hardware logs NAME [-f]`: what a machine sent to tink-netboot's syslog receiver
//! (its kernel log and its OSIE's init messages, from the moment it had an address), so a boot
//! that fails before the agent starts can be followed.
//!
//! `tinkctl hardware approve NAME`: lets a discovered machine (a Hardware the controller created
//! when an unknown machine enrolled, `spec.discovery.approved: false`) get Workflows, with a
//! merge patch of `spec.discovery.approved: true`. The webhook allows it only for users with the
//! RBAC verb `approve` on `hardware.tinkerbell.org` (deploy/rbac/hardware-approver.yaml) and
//! its refusal is printed as it is. `tinkctl hardware list [-o wide]`: the Hardware of a
//! namespace with their MACs, approval and (wide) the inventory the agent reported.
//! `tinkctl hardware inventory NAME [--refresh]`: the reported inventory as JSON; `--refresh`
//! asks the agent for a fresh one first (annotation `tinkerbell.org/inventory-request`, which
//! the controller turns into a request on the agent's stream) and waits for the answer.
//!
//! The lines are read from NATS JetStream (stream `TINK_SYSLOG`, subject
//! `tink.syslog.<token of namespace/name>`, [`tink_bus::read_syslog`]) with the NATS login of
//! `workflow logs --nats-url` (`tink-admin`, which the dev stack's env file sets). The
//! Hardware is looked up first, so a mistyped name is an error rather than an empty log.

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};
use tink_api::v1alpha2::Hardware;

use crate::kubeconfig::KubeArgs;
use crate::logs::NatsLogin;

/// Hardware commands.
#[derive(Subcommand, Debug)]
pub enum HardwareCommand {
    /// Print a machine's boot log received by syslog (time received, severity, program,
    /// message), oldest first; `-f` keeps printing new lines.
    Logs(HardwareLogsArgs),
    /// Approve a discovered machine (set spec.discovery.approved), so it may get Workflows;
    /// needs the RBAC verb `approve` on hardware.tinkerbell.org.
    Approve(HardwareApproveArgs),
    /// List Hardware: name, MACs, approval (yes, no, or - for Hardware that was not
    /// discovered); `-o wide` adds the inventory the agent reported.
    List(HardwareListArgs),
    /// Print the inventory a machine's agent reported (JSON, Tinkerbell's attributes shape);
    /// `--refresh` first asks the agent for a fresh one and waits for its answer.
    Inventory(HardwareInventoryArgs),
}

/// Arguments of `hardware inventory`.
#[derive(Args, Debug, Clone)]
pub struct HardwareInventoryArgs {
    /// The Hardware's name.
    pub name: String,
    /// The Hardware's namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Ask the machine's agent for a fresh inventory (annotation
    /// tinkerbell.org/inventory-request) and wait until it answered.
    #[arg(long)]
    pub refresh: bool,
    /// How long `--refresh` waits for the answer (the agent must be running: it answers from
    /// the OSIE). `0s`: do not wait.
    #[arg(long, default_value = "2m", value_parser = parse_wait)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Arguments of `hardware approve`.
#[derive(Args, Debug, Clone)]
pub struct HardwareApproveArgs {
    /// The Hardware's name (a discovered machine's is `discovery-<mac>`).
    pub name: String,
    /// The Hardware's namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// Output formats of `hardware list`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListOutput {
    /// Also threads, memory, serial number and the inventory's age.
    Wide,
}

/// Arguments of `hardware list`.
#[derive(Args, Debug, Clone)]
pub struct HardwareListArgs {
    /// The namespace.
    #[arg(short, long, env = "TINK_NAMESPACE", default_value = "default")]
    pub namespace: String,
    /// Output format.
    #[arg(short, long, value_enum)]
    pub output: Option<ListOutput>,
    #[command(flatten)]
    pub kube: KubeArgs,
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
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match cmd {
        HardwareCommand::Logs(args) => rt.block_on(logs(&args)),
        HardwareCommand::Approve(args) => rt.block_on(approve(&args)),
        HardwareCommand::List(args) => rt.block_on(list(&args)),
        HardwareCommand::Inventory(args) => rt.block_on(inventory(&args)),
    }
}

/// `--timeout`: `90s`, `2m`, `1m30s` or seconds; `0s` allowed.
fn parse_wait(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(std::time::Duration::from_secs(secs));
    }
    let d: jiff::SignedDuration = s
        .parse()
        .map_err(|e| format!("{s:?} is not a duration such as 90s, 2m or 1m30s: {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| format!("{s:?} is negative"))
}

async fn inventory(args: &HardwareInventoryArgs) -> anyhow::Result<()> {
    use tink_api::v1alpha2::{INVENTORY_REQUEST_ANNOTATION, inventory_request_id};
    let (ns, name) = (&args.namespace, &args.name);
    let client = args.kube.client().await?;
    let api: Api<Hardware> = Api::namespaced(client, ns);
    let Some(mut hw) = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading Hardware {ns}/{name}"))?
    else {
        anyhow::bail!("no Hardware {name:?} in namespace {ns:?}");
    };
    if args.refresh {
        let value = jiff::Timestamp::now().to_string();
        let patch = json!({"metadata": {"annotations": {INVENTORY_REQUEST_ANNOTATION: value}}});
        hw = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "asking for hardware/{name}'s inventory was refused: {}",
                    refused(e)
                )
            })?;
        let uid = hw.metadata.uid.clone().unwrap_or_default();
        let id = inventory_request_id(&uid, &value);
        eprintln!("asked hardware/{name}'s agent for a fresh inventory (request {id})");
        if args.timeout.is_zero() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + args.timeout;
        loop {
            if hw
                .status
                .as_ref()
                .and_then(|s| s.inventory_request.as_deref())
                == Some(&id)
            {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                anyhow::bail!(
                    "hardware/{name}'s agent did not answer within {}: is it running (it answers from the OSIE)? The request stays (annotation {INVENTORY_REQUEST_ANNOTATION}) and is answered when the agent connects",
                    jiff::SignedDuration::try_from(args.timeout)
                        .map(|d| format!("{d:#}"))
                        .unwrap_or_default()
                );
            }
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            hw = api
                .get(name)
                .await
                .with_context(|| format!("reading Hardware {ns}/{name}"))?;
        }
    }
    let status = hw.status.clone().unwrap_or_default();
    let Some(in_band) = status.attributes.as_ref().and_then(|a| a.in_band.as_ref()) else {
        anyhow::bail!("hardware/{name} has no inventory yet: its agent reports one when it starts");
    };
    eprintln!(
        "reported at {} by {}",
        status.inventory_reported_at.as_deref().unwrap_or("-"),
        match status.inventory_source.as_deref() {
            Some("Agent") => "the machine's authenticated agent",
            Some("Enrollment") => "an enrollment (no credentials; not trusted for rules)",
            _ => "an unknown source",
        }
    );
    println!(
        "{}",
        serde_json::to_string_pretty(in_band).context("printing the inventory")?
    );
    Ok(())
}

/// The refusal of an API call, as the API server (or its webhook) worded it.
fn refused(e: kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message,
        other => other.to_string(),
    }
}

async fn approve(args: &HardwareApproveArgs) -> anyhow::Result<()> {
    let (ns, name) = (&args.namespace, &args.name);
    let client = args.kube.client().await?;
    let api: Api<Hardware> = Api::namespaced(client, ns);
    let Some(hw) = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading Hardware {ns}/{name}"))?
    else {
        anyhow::bail!("no Hardware {name:?} in namespace {ns:?}");
    };
    let Some(discovery) = &hw.spec.discovery else {
        anyhow::bail!(
            "hardware/{name} in namespace {ns:?} has no spec.discovery: it was not discovered (a person wrote it), so there is nothing to approve"
        );
    };
    if discovery.approved {
        println!("hardware/{name} is already approved");
        return Ok(());
    }
    let patch = json!({"spec": {"discovery": {"approved": true}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "approving hardware/{name} in namespace {ns:?} was refused: {}",
                refused(e)
            )
        })?;
    println!("hardware/{name} approved");
    Ok(())
}

async fn list(args: &HardwareListArgs) -> anyhow::Result<()> {
    let client = args.kube.client().await?;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(tink_api::GROUP, tink_api::v1alpha2::VERSION, "Hardware"),
        "hardware",
    );
    // Untyped: one malformed object is a row with blanks, not a failed listing.
    let api: Api<DynamicObject> = Api::namespaced_with(client, &args.namespace, &resource);
    let items = api
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing Hardware in namespace {:?}", args.namespace))?
        .items;
    if items.is_empty() {
        eprintln!("no Hardware in namespace {:?}", args.namespace);
        return Ok(());
    }
    let wide = args.output == Some(ListOutput::Wide);
    let now = jiff::Timestamp::now();
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|hw| {
            row(
                hw.metadata.name.as_deref().unwrap_or_default(),
                &hw.data,
                wide,
                now,
            )
        })
        .collect();
    print!("{}", table(&header(wide), &rows));
    Ok(())
}

fn header(wide: bool) -> Vec<String> {
    let mut h = vec!["NAME", "MACS", "APPROVED"];
    if wide {
        h.extend(["THREADS", "MEMORY", "SERIAL", "INVENTORY"]);
    }
    h.into_iter().map(String::from).collect()
}

/// One Hardware's cells; `-` where there is nothing to show.
fn row(name: &str, data: &Value, wide: bool, now: jiff::Timestamp) -> Vec<String> {
    let dash = || "-".to_string();
    let macs: Vec<&str> = data
        .pointer("/spec/networkInterfaces")
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let approved = match data.pointer("/spec/discovery") {
        None | Some(Value::Null) => dash(),
        Some(d) if d["approved"] == json!(true) => "yes".into(),
        Some(_) => "no".into(),
    };
    let mut cells = vec![
        name.to_string(),
        if macs.is_empty() {
            dash()
        } else {
            macs.join(",")
        },
        approved,
    ];
    if wide {
        let in_band = |path: &str| data.pointer(&format!("/status/attributes/inBand{path}"));
        cells.push(
            in_band("/cpu/totalThreads")
                .and_then(Value::as_u64)
                .map_or_else(dash, |n| n.to_string()),
        );
        cells.push(
            in_band("/memory/totalBytes")
                .and_then(Value::as_u64)
                .map_or_else(dash, bytes),
        );
        cells.push(
            in_band("/product/serialNumber")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map_or_else(dash, String::from),
        );
        cells.push(
            data.pointer("/status/inventoryReportedAt")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map_or_else(dash, |at| age(now.duration_since(at))),
        );
    }
    cells
}

/// Bytes in binary units, as kubectl shows quantities: `512Mi`, `15.6Gi`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["", "Ki", "Mi", "Gi", "Ti"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value}{}", UNITS[unit])
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

/// An age as kubectl shows it: `45s`, `12m`, `5h`, `3d`.
fn age(d: jiff::SignedDuration) -> String {
    let s = d.as_secs().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Left-aligned columns separated by three spaces, as kubectl prints.
fn table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        let last = r.len().saturating_sub(1);
        for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:<w$}   "));
            }
        }
        out.push('\n');
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_show_approval_and_the_inventory() {
        let now: jiff::Timestamp = "2026-11-27T17:00:00Z".parse().unwrap();
        let discovered = json!({"spec": {"networkInterfaces": {"52:54:00:0b:5e:02": {}},
                "discovery": {"approved": false}},
            "status": {"inventoryReportedAt": "2026-11-27T16:55:00Z", "attributes": {"inBand": {
                "cpu": {"totalThreads": 8}, "memory": {"totalBytes": 17179869184u64},
                "product": {"serialNumber": "QEMU-1234"}}}}});
        assert_eq!(
            row("discovery-52-54-00-0b-5e-02", &discovered, true, now),
            [
                "discovery-52-54-00-0b-5e-02",
                "52:54:00:0b:5e:02",
                "no",
                "8",
                "16Gi",
                "QEMU-1234",
                "5m"
            ]
        );
        let mut approved = discovered.clone();
        approved["spec"]["discovery"]["approved"] = json!(true);
        assert_eq!(
            row("d", &approved, false, now),
            ["d", "52:54:00:0b:5e:02", "yes"]
        );
        let plain = json!({"spec": {"networkInterfaces": {"aa:bb:cc:dd:ee:01": {}, "aa:bb:cc:dd:ee:02": {}}}});
        assert_eq!(
            row("sm01", &plain, true, now),
            [
                "sm01",
                "aa:bb:cc:dd:ee:01,aa:bb:cc:dd:ee:02",
                "-",
                "-",
                "-",
                "-",
                "-"
            ]
        );
    }

    #[test]
    fn sizes_ages_and_columns_read_like_kubectl() {
        assert_eq!(bytes(512), "512");
        assert_eq!(bytes(536_870_912), "512Mi");
        assert_eq!(bytes(16_750_000_000), "15.6Gi");
        assert_eq!(age(jiff::SignedDuration::from_secs(45)), "45s");
        assert_eq!(age(jiff::SignedDuration::from_secs(7300)), "2h");
        assert_eq!(age(jiff::SignedDuration::from_secs(3 * 86400 + 5)), "3d");
        let t = table(
            &header(false),
            &[
                vec!["a".into(), "x".into(), "yes".into()],
                vec!["longer-name".into(), "-".into(), "-".into()],
            ],
        );
        assert_eq!(
            t,
            "NAME          MACS   APPROVED\na             x      yes\nlonger-name   -      -\n"
        );
    }
}
