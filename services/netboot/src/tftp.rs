//! A read-only TFTP server (RFC 1350) with the option extension (RFC 2347) and the `blksize`
//! (RFC 2348), `tsize` and `timeout` (RFC 2349) options: enough for PXE ROMs to fetch iPXE.
//!
//! Each read request gets its own socket (its transfer ID) and task; write requests are refused.
//! Every file comes from the [`Root`] (no traversal). A block is sent again after the timeout,
//! up to [`TftpConfig::retries`] times, then the transfer is abandoned. Duplicate ACKs of an
//! older block are ignored (no Sorcerer's Apprentice). Block numbers wrap after 65535, so files
//! of any size go through.
//!
//! Bounded against clients that stall (or pretend to): a client's `timeout` option is accepted
//! only up to [`TftpConfig::max_timeout`] (otherwise left out of the OACK, as RFC 2349 allows),
//! one host holds at most [`TftpConfig::max_transfers_per_peer`] transfers at once, and every
//! transfer ends at [`TftpConfig::transfer_deadline`]. Without these, 256 requests asking for a
//! 255-second timeout and never acknowledging held every slot for about 25 minutes.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::files::{FileError, Root};
use crate::metrics::Metrics;

const RRQ: u16 = 1;
const WRQ: u16 = 2;
const DATA: u16 = 3;
const ACK: u16 = 4;
const ERROR: u16 = 5;
const OACK: u16 = 6;

const ERR_NOT_DEFINED: u16 = 0;
const ERR_NOT_FOUND: u16 = 1;
const ERR_ACCESS: u16 = 2;
const ERR_ILLEGAL: u16 = 4;
const ERR_OPTION: u16 = 8;

const DEFAULT_BLKSIZE: usize = 512;
const MAX_BLKSIZE: usize = 65_464;

/// How the TFTP server runs.
#[derive(Clone, Debug)]
pub struct TftpConfig {
    /// Seconds to wait for an ACK when the client asks for no `timeout`.
    pub timeout: Duration,
    /// Times a block is sent again before the transfer is abandoned.
    pub retries: u32,
    /// Transfers at once; more read requests are refused with an error packet.
    pub max_transfers: usize,
    /// The longest `timeout` option accepted from a client; a longer one is ignored.
    pub max_timeout: Duration,
    /// Transfers one host (source address) may hold at once; more are refused.
    pub max_transfers_per_peer: usize,
    /// How long one transfer may take in all; then it is abandoned.
    pub transfer_deadline: Duration,
}

impl Default for TftpConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            retries: 5,
            max_transfers: 256,
            max_timeout: Duration::from_secs(5),
            max_transfers_per_peer: 4,
            transfer_deadline: Duration::from_secs(300),
        }
    }
}

/// Transfers in progress per host.
#[derive(Clone, Default)]
struct PeerCounts(Arc<Mutex<HashMap<IpAddr, usize>>>);

impl PeerCounts {
    /// Takes a slot for `ip`, unless it already holds `max`.
    fn take(&self, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let mut counts = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = counts.entry(ip).or_insert(0);
        if *n >= max.max(1) {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: self.clone(),
            ip,
        })
    }
}

/// One transfer's hold on its host's count, given back on drop.
struct PeerSlot {
    counts: PeerCounts,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.ip);
            }
        }
    }
}

/// A parsed read request.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadRequest {
    /// The file name.
    pub file: String,
    /// `netascii` or `octet` (files are sent as they are either way).
    pub mode: String,
    /// Options in the order sent, names lower-cased.
    pub options: Vec<(String, String)>,
}

/// A request that is not a well-formed read request.
#[derive(Debug, PartialEq, Eq)]
pub enum BadRequest {
    /// A write request.
    Write,
    /// Anything else, or garbage.
    Illegal,
}

fn fields(mut rest: &[u8]) -> Option<Vec<String>> {
    let mut out = Vec::new();
    while !rest.is_empty() {
        let end = rest.iter().position(|b| *b == 0)?;
        out.push(String::from_utf8(rest[..end].to_vec()).ok()?);
        rest = &rest[end + 1..];
    }
    Some(out)
}

/// Parses a request packet.
pub fn parse_request(packet: &[u8]) -> Result<ReadRequest, BadRequest> {
    let (op, rest) = match packet {
        [a, b, rest @ ..] => (u16::from_be_bytes([*a, *b]), rest),
        _ => return Err(BadRequest::Illegal),
    };
    match op {
        RRQ => {}
        WRQ => return Err(BadRequest::Write),
        _ => return Err(BadRequest::Illegal),
    }
    let f = fields(rest).ok_or(BadRequest::Illegal)?;
    let [file, mode, opts @ ..] = f.as_slice() else {
        return Err(BadRequest::Illegal);
    };
    let mode = mode.to_ascii_lowercase();
    if mode != "octet" && mode != "netascii" {
        return Err(BadRequest::Illegal);
    }
    let options = opts
        .chunks(2)
        .filter_map(|c| match c {
            [k, v] => Some((k.to_ascii_lowercase(), v.clone())),
            _ => None,
        })
        .collect();
    Ok(ReadRequest {
        file: file.clone(),
        mode,
        options,
    })
}

fn error_packet(code: u16, message: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(5 + message.len());
    p.extend_from_slice(&ERROR.to_be_bytes());
    p.extend_from_slice(&code.to_be_bytes());
    p.extend_from_slice(message.as_bytes());
    p.push(0);
    p
}

/// Serves TFTP on `socket` until `shutdown`.
pub async fn serve(
    socket: UdpSocket,
    root: Root,
    config: TftpConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    if let Ok(addr) = socket.local_addr() {
        tracing::info!(%addr, dir = %root.dir().display(), "TFTP listening");
    }
    let local_ip = socket.local_addr()?.ip();
    let slots = Arc::new(Semaphore::new(config.max_transfers.max(1)));
    let peers = PeerCounts::default();
    let root = Arc::new(root);
    let tasks = tokio_util::task::TaskTracker::new();
    let mut buf = vec![0u8; 2048];
    loop {
        let (n, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(error) => {
                    // ICMP errors of earlier sends show up here; the socket is still usable.
                    tracing::debug!(%error, "TFTP receive error");
                    continue;
                }
            },
        };
        let packet = &buf[..n];
        let req = match parse_request(packet) {
            Ok(r) => r,
            Err(bad) => {
                let (code, msg, result) = match bad {
                    BadRequest::Write => (ERR_ACCESS, "read-only server", "refused"),
                    BadRequest::Illegal => (ERR_ILLEGAL, "illegal TFTP operation", "error"),
                };
                tracing::debug!(%peer, ?bad, "TFTP request refused");
                metrics.tftp(result);
                let _ = socket.send_to(&error_packet(code, msg), peer).await;
                continue;
            }
        };
        let Some(peer_slot) = peers.take(peer.ip(), config.max_transfers_per_peer) else {
            tracing::debug!(%peer, "TFTP request refused: this host has too many transfers");
            metrics.tftp("busy");
            let _ = socket
                .send_to(
                    &error_packet(ERR_NOT_DEFINED, "too many transfers from this host"),
                    peer,
                )
                .await;
            continue;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            metrics.tftp("busy");
            let _ = socket
                .send_to(&error_packet(ERR_NOT_DEFINED, "server busy"), peer)
                .await;
            continue;
        };
        let root = root.clone();
        let config = config.clone();
        let metrics = metrics.clone();
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let deadline = config.transfer_deadline;
            let result = tokio::select! {
                r = tokio::time::timeout(deadline, transfer(local_ip, peer, &req, &root, &config, &metrics)) => {
                    r.unwrap_or("deadline")
                }
                () = stop.cancelled() => "cancelled",
            };
            tracing::debug!(%peer, file = %req.file, result, "TFTP transfer ended");
            metrics.tftp(result);
            drop(permit);
            drop(peer_slot);
        });
    }
    tasks.close();
    // Transfers end with the shutdown token too; wait for them to notice.
    tasks.wait().await;
    Ok(())
}

/// One read transfer; returns the metric result.
async fn transfer(
    local_ip: std::net::IpAddr,
    peer: SocketAddr,
    req: &ReadRequest,
    root: &Root,
    config: &TftpConfig,
    metrics: &Metrics,
) -> &'static str {
    let socket = match UdpSocket::bind(SocketAddr::new(local_ip, 0)).await {
        Ok(s) => s,
        Err(error) => {
            tracing::warn!(%error, "cannot open a TFTP transfer socket");
            return "error";
        }
    };
    if socket.connect(peer).await.is_err() {
        return "error";
    }
    let (mut file, size) = match root.open(&req.file).await {
        Ok(f) => f,
        Err(FileError::NotFound) => {
            tracing::debug!(%peer, file = %req.file, "TFTP file not found");
            let _ = socket
                .send(&error_packet(ERR_NOT_FOUND, "file not found"))
                .await;
            return "not_found";
        }
        Err(FileError::Refused) => {
            tracing::info!(%peer, file = %req.file, "TFTP path refused");
            let _ = socket
                .send(&error_packet(ERR_ACCESS, "access violation"))
                .await;
            return "refused";
        }
        Err(FileError::Io(error)) => {
            tracing::warn!(%peer, file = %req.file, %error, "TFTP read error");
            let _ = socket
                .send(&error_packet(ERR_NOT_DEFINED, "read error"))
                .await;
            return "error";
        }
    };

    // Options: answer the ones understood, in an OACK (RFC 2347).
    let mut blksize = DEFAULT_BLKSIZE;
    let mut timeout = config.timeout;
    let mut oack: Vec<(String, String)> = Vec::new();
    for (k, v) in &req.options {
        match k.as_str() {
            "blksize" => {
                let Ok(n) = v.parse::<usize>() else { continue };
                if n < 8 {
                    let _ = socket
                        .send(&error_packet(ERR_OPTION, "blksize below 8"))
                        .await;
                    return "error";
                }
                blksize = n.min(MAX_BLKSIZE);
                oack.push((k.clone(), blksize.to_string()));
            }
            "tsize" => oack.push((k.clone(), size.to_string())),
            "timeout" => {
                let Ok(n) = v.parse::<u64>() else { continue };
                // Longer than allowed: left out of the OACK, the server's own timeout applies.
                if (1..=255).contains(&n) && Duration::from_secs(n) <= config.max_timeout {
                    timeout = Duration::from_secs(n);
                    oack.push((k.clone(), n.to_string()));
                }
            }
            _ => {}
        }
    }
    let mut recv = vec![0u8; 1024];
    if !oack.is_empty() {
        let mut p = OACK.to_be_bytes().to_vec();
        for (k, v) in &oack {
            p.extend_from_slice(k.as_bytes());
            p.push(0);
            p.extend_from_slice(v.as_bytes());
            p.push(0);
        }
        match send_and_wait(&socket, &p, 0, timeout, config.retries, &mut recv).await {
            Ok(()) => {}
            Err(r) => return r,
        }
    }

    let mut block: u16 = 1;
    let mut data = vec![0u8; 4 + blksize];
    loop {
        data[..2].copy_from_slice(&DATA.to_be_bytes());
        data[2..4].copy_from_slice(&block.to_be_bytes());
        let n = match read_full(&mut file, &mut data[4..]).await {
            Ok(n) => n,
            Err(error) => {
                tracing::warn!(%peer, file = %req.file, %error, "TFTP read error");
                let _ = socket
                    .send(&error_packet(ERR_NOT_DEFINED, "read error"))
                    .await;
                return "error";
            }
        };
        if let Err(r) = send_and_wait(
            &socket,
            &data[..4 + n],
            block,
            timeout,
            config.retries,
            &mut recv,
        )
        .await
        {
            return r;
        }
        metrics.tftp_bytes.inc_by(n as u64);
        if n < blksize {
            return "ok";
        }
        block = block.wrapping_add(1);
    }
}

/// Fills `buf` from `file` unless the file ends first; returns the bytes read.
async fn read_full(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

/// Sends `packet` until the ACK of `block` arrives; `Err` is the metric result.
async fn send_and_wait(
    socket: &UdpSocket,
    packet: &[u8],
    block: u16,
    timeout: Duration,
    retries: u32,
    recv: &mut [u8],
) -> Result<(), &'static str> {
    for _ in 0..=retries {
        if socket.send(packet).await.is_err() {
            return Err("error");
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let n = match tokio::time::timeout_at(deadline, socket.recv(recv)).await {
                Err(_) => break, // timed out: send again
                Ok(Err(_)) => return Err("error"),
                Ok(Ok(n)) => n,
            };
            // Shorter than an opcode and a block number: not a packet of this protocol; ignored.
            if let Some([a, b, c, d, ..]) = recv.get(..n) {
                let op = u16::from_be_bytes([*a, *b]);
                let num = u16::from_be_bytes([*c, *d]);
                match op {
                    ACK if num == block => return Ok(()),
                    // An old block's ACK again: wait for ours, do not resend.
                    ACK => {}
                    ERROR => return Err("client_error"),
                    _ => {
                        let _ = socket
                            .send(&error_packet(ERR_ILLEGAL, "unexpected packet"))
                            .await;
                        return Err("error");
                    }
                }
            }
        }
    }
    Err("timeout")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        let mut p = vec![0, 1];
        p.extend_from_slice(b"undionly.kpxe\0octet\0blksize\x001428\0TSIZE\x000\0");
        let r = parse_request(&p).unwrap();
        assert_eq!(r.file, "undionly.kpxe");
        assert_eq!(r.mode, "octet");
        assert_eq!(
            r.options,
            [
                ("blksize".into(), "1428".into()),
                ("tsize".into(), "0".into())
            ]
        );
        assert_eq!(
            parse_request(b"\0\x02f\0octet\0").unwrap_err(),
            BadRequest::Write
        );
        for bad in [
            &b""[..],
            b"\0",
            b"\0\x01",
            b"\0\x01file",
            b"\0\x01file\0",
            b"\0\x01file\0mail\0",
            b"\0\x03data",
            b"\0\x01\xff\xfe\0octet\0",
        ] {
            assert_eq!(
                parse_request(bad).unwrap_err(),
                BadRequest::Illegal,
                "{bad:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600)) {
            let _ = parse_request(&bytes);
        }
    }
}
