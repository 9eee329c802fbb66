//! The syslog receiver (RFC 3164 and RFC 5424 over UDP, port 514 as Smee's): machines' boot
//! logs, so a boot that fails before the agent starts is visible to the operator.
//!
//! Each datagram is attributed to a Hardware by its source address, in the same watch-fed
//! index DHCP answers from (`dhcp.ip` of its interfaces, one hash lookup), and then:
//!
//! 1. an address no Hardware owns (or two claim) is counted and dropped
//!    (`netboot_syslog_datagrams_total{result="unknown_source"|"conflicting_source"}`), as are
//!    datagrams before the index is listed (`not_ready`);
//! 2. each source address has a token bucket ([`limit`]): a flood is held to `--syslog-rate`
//!    lines a second after a `--syslog-burst`, the rest counted (`rate_limited`) and logged once
//!    per 30 s per source with the count;
//! 3. the datagram is parsed ([`parse`]); one that cannot be read is counted (`malformed`);
//! 4. the line (control characters replaced, cut at `--syslog-max-line-bytes`, secret kernel
//!    parameters hidden) goes to a bounded queue (`--syslog-queue`; full: `queue_full`) and is
//!    published to NATS JetStream on the Hardware's subject `tink.syslog.<token>`
//!    (stream `TINK_SYSLOG`, [`tink_bus::syslog_stream_config`]), whose per-subject limit is
//!    the per-machine ring (`--syslog-lines-per-machine`).
//!
//! Readers: `tinkctl hardware logs NAME [-f]` and the console's machine page read the stream.
//! Why JetStream and not memory here: netboot runs one replica per provisioning segment (a
//! DaemonSet); the stream gathers every replica's lines in one place, keeps them across
//! restarts, and readers need no route to the netboot hosts, only the NATS permissions they
//! already have.
//!
//! NATS being away never stops DHCP, TFTP or HTTP: the publisher waits for it in the
//! background while the queue fills and then drops (counted). Only a refused login stops the
//! service (a configuration error).

pub mod limit;
pub mod parse;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tink_bus::{NatsAuth, SyslogLimits, SyslogLine};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::index::{Index, Lookup};
use crate::metrics::Metrics;
use limit::{Limiter, RateLimit, Verdict};

/// The syslog port (RFC 5426).
pub const SYSLOG_PORT: u16 = 514;

/// The largest datagram read; longer ones are cut by the socket (RFC 5426 asks receivers to
/// take at least 2,048 bytes; IPv4 UDP carries at most 65,507).
const MAX_DATAGRAM: usize = 65_536;

/// Acknowledgements awaited at once by the publisher.
const IN_FLIGHT: usize = 256;

/// The receive buffer asked of the kernel: a boot log arrives as a burst of a thousand or more
/// datagrams when klogd starts.
const RECEIVE_BUFFER: usize = 4 << 20;

/// Where the lines go.
#[derive(Debug, Clone)]
pub struct SyslogNats {
    /// NATS URL(s), comma separated.
    pub url: String,
    /// How to log in (deploy/'s user is `tink-netboot`).
    pub auth: NatsAuth,
}

/// The receiver's settings.
#[derive(Debug, Clone)]
pub struct SyslogConfig {
    /// The UDP listener (`0.0.0.0:514`).
    pub listen: SocketAddr,
    /// The stream's bounds and the longest line.
    pub limits: SyslogLimits,
    /// The per-source rate limit.
    pub rate: RateLimit,
    /// Lines waiting to be published, at most.
    pub queue: usize,
    /// The NATS the lines are published to.
    pub nats: SyslogNats,
}

impl SyslogConfig {
    /// `listen`, publishing to `nats`, with the default bounds.
    pub fn new(listen: SocketAddr, nats: SyslogNats) -> Self {
        Self {
            listen,
            limits: SyslogLimits::default(),
            rate: RateLimit::default(),
            queue: 8192,
            nats,
        }
    }
}

/// Binds the receiver's socket, with a large receive buffer.
pub fn bind(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    s.set_reuse_address(true)?;
    // Best effort: the kernel caps it at net.core.rmem_max.
    let _ = s.set_recv_buffer_size(RECEIVE_BUFFER);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    UdpSocket::from_std(s.into())
}

/// One line ready to publish.
struct Outgoing {
    subject: String,
    line: SyslogLine,
}

/// Why the receiver stopped.
#[derive(Debug, thiserror::Error)]
pub enum SyslogError {
    /// The socket failed.
    #[error("syslog socket: {0}")]
    Socket(#[from] std::io::Error),
    /// NATS refused the login.
    #[error("syslog: {0}")]
    Nats(#[from] tink_bus::NatsConnectError),
}

/// Receives on `socket` and publishes until `shutdown`.
pub async fn serve(
    socket: UdpSocket,
    config: SyslogConfig,
    index: Arc<Index>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Result<(), SyslogError> {
    let (tx, rx) = mpsc::channel(config.queue.max(1));
    let publisher = publish(
        config.nats.clone(),
        config.limits.clone(),
        rx,
        metrics.clone(),
    );
    let receiver = receive(socket, &config, index, tx, metrics);
    tokio::select! {
        _ = shutdown.cancelled() => Ok(()),
        r = receiver => r.map_err(SyslogError::Socket),
        r = publisher => r,
    }
}

/// The receive loop: attribute, limit, parse, queue.
async fn receive(
    socket: UdpSocket,
    config: &SyslogConfig,
    index: Arc<Index>,
    tx: mpsc::Sender<Outgoing>,
    metrics: Metrics,
) -> std::io::Result<()> {
    tracing::info!(addr = %socket.local_addr()?, "syslog listening");
    let mut limiter = Limiter::new(config.rate);
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            // ICMP errors of earlier sends and the like: nothing to do with this socket's
            // health (it sends nothing).
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => continue,
            Err(e) => return Err(e),
        };
        let datagram = buf.get(..n).unwrap_or_default();
        let verdict = accept(datagram, from, config, &index, &mut limiter, Instant::now());
        match verdict {
            Accepted::Line(out) => match tx.try_send(*out) {
                Ok(()) => metrics.syslog("accepted"),
                Err(_) => metrics.syslog("queue_full"),
            },
            Accepted::Dropped(reason) => metrics.syslog(reason),
        }
    }
}

/// What happened to one datagram.
enum Accepted {
    /// A line for this subject.
    Line(Box<Outgoing>),
    /// Dropped, for this reason (the metric's `result`).
    Dropped(&'static str),
}

/// The decision for one datagram (no IO).
fn accept(
    datagram: &[u8],
    from: SocketAddr,
    config: &SyslogConfig,
    index: &Index,
    limiter: &mut Limiter,
    now: Instant,
) -> Accepted {
    let source = from.ip().to_canonical();
    if !index.synced() {
        return Accepted::Dropped("not_ready");
    }
    let key = match index.by_ip(source) {
        Lookup::Found(machine, _) => machine.key.clone(),
        Lookup::Unknown => {
            tracing::debug!(%source, "syslog from an address no Hardware owns: dropped");
            return Accepted::Dropped("unknown_source");
        }
        Lookup::Conflict(owners) => {
            tracing::debug!(%source, ?owners, "syslog from an address several Hardware claim: dropped");
            return Accepted::Dropped("conflicting_source");
        }
    };
    if let Verdict::Limited { report } = limiter.check(source, now) {
        if let Some(count) = report {
            tracing::warn!(
                %source,
                hardware = %key,
                refused = count,
                rate = config.rate.rate,
                burst = config.rate.burst,
                "syslog flood: lines over the per-source rate limit dropped"
            );
        }
        return Accepted::Dropped("rate_limited");
    }
    let message = match parse::parse(datagram) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(%source, error = %e, "malformed syslog datagram");
            return Accepted::Dropped("malformed");
        }
    };
    let Some((namespace, name)) = key.split_once('/') else {
        return Accepted::Dropped("unknown_source");
    };
    let Ok(subject) = tink_bus::syslog_subject(namespace, name) else {
        return Accepted::Dropped("unknown_source");
    };
    let line = line_of(&message, source, config.limits.max_line_bytes);
    Accepted::Line(Box::new(Outgoing { subject, line }))
}

/// The stored form of a parsed datagram from `source`.
pub fn line_of(message: &parse::Message<'_>, source: IpAddr, max_line_bytes: usize) -> SyslogLine {
    let short = |s: Option<&str>| s.map(|s| parse::clean(s.as_bytes(), 255));
    SyslogLine {
        received: jiff::Timestamp::now(),
        timestamp: short(message.timestamp),
        source: source.to_string(),
        facility: message.facility,
        severity: message.severity,
        hostname: short(message.hostname),
        app: short(message.app),
        procid: short(message.procid),
        message: parse::clean(message.text, max_line_bytes.max(16)),
    }
}

/// The publish loop: connects (waiting for NATS as long as it takes), makes sure the stream
/// exists with `limits`, then publishes each queued line, up to [`IN_FLIGHT`] awaiting their
/// acknowledgements. Lost acknowledgements are counted (`publish_error`), never retried: a
/// boot log line is not worth a stalled queue.
async fn publish(
    nats: SyslogNats,
    limits: SyslogLimits,
    mut rx: mpsc::Receiver<Outgoing>,
    metrics: Metrics,
) -> Result<(), SyslogError> {
    let client = tink_bus::connect(&nats.url, &nats.auth, || {
        async_nats::ConnectOptions::new()
            .name("tink-netboot syslog")
            .ping_interval(tink_bus::PING_INTERVAL)
    })
    .await?;
    let js = async_nats::jetstream::new(client);
    let mut delay = Duration::from_millis(200);
    loop {
        match tink_bus::ensure_syslog_stream(&js, &limits).await {
            Ok(_) => break,
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?delay, "syslog: cannot set up the stream; lines wait in the queue");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
    tracing::info!(
        stream = tink_bus::SYSLOG_STREAM,
        "syslog: publishing to NATS JetStream"
    );
    let mut acks = FuturesUnordered::new();
    let mut warned: Option<Instant> = None;
    let mut failed = |metrics: &Metrics, e: &dyn std::fmt::Display| {
        metrics.syslog_publish_errors.inc();
        if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(30)) {
            warned = Some(Instant::now());
            tracing::warn!(error = %e, "syslog: a line could not be stored (counted in netboot_syslog_publish_errors_total)");
        }
    };
    loop {
        tokio::select! {
            next = rx.recv() => {
                let Some(out) = next else { return Ok(()) };
                while acks.len() >= IN_FLIGHT {
                    if let Some(Err(e)) = acks.next().await {
                        failed(&metrics, &e);
                    }
                }
                match js.publish(out.subject, out.line.to_bytes()).await {
                    Ok(ack) => acks.push(ack.into_future()),
                    Err(e) => failed(&metrics, &e),
                }
            }
            Some(done) = acks.next(), if !acks.is_empty() => {
                if let Err(e) = done {
                    failed(&metrics, &e);
                }
            }
        }
    }
}
