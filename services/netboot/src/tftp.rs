//! A read-only TFTP server (RFC 1350) with the option extension (RFC 2347) and the `blksize`
//! (RFC 2348), `tsize` and `timeout` (RFC 2349) and `windowsize` (RFC 7440) options: enough for
//! PXE ROMs to fetch iPXE, and for clients that ask for a window to fetch large files fast.
//!
//! `windowsize`: up to that many blocks are sent before an ACK is awaited. An ACK of block n
//! moves the window to n + 1 (an ACK inside the window, sent by a client that missed a block,
//! means "go on from there": the rest is sent again); no ACK before the timeout sends the whole
//! window again. A request of 1..=65535 is granted up to [`TftpConfig::max_windowsize`]
//! (default 64), and lowered further until the window holds at most [`MAX_WINDOW_BYTES`]
//! (1 MiB) of file data; 0 or a value that is not a number is ignored and left out of the
//! OACK (RFC 2347), and the transfer runs one block at a time.
//!
//! Each read request gets its own socket (its transfer ID) and task; write requests are refused.
//! Every file comes from the [`Root`] (no traversal). A block is sent again after the timeout,
//! up to [`TftpConfig::retries`] times, then the transfer is abandoned. Duplicate ACKs of an
//! older block are ignored (no Sorcerer's Apprentice). Block numbers wrap after 65535, so files
//! of any size go through. With a window, an ACK of the block before the window (nothing new,
//! which a windowed client sends to ask for the window again) resends it at most once per
//! round.
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
/// The most file data one transfer holds for its window (RFC 7440): `windowsize` is lowered
/// until `windowsize * blksize` fits (16 blocks of the largest `blksize`).
pub const MAX_WINDOW_BYTES: usize = 1 << 20;
/// File data read at once for a transfer (more when a window is larger): one read per 44
/// blocks of 1468 bytes rather than one per block.
const READ_AHEAD: usize = 64 * 1024;

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
    /// The largest `windowsize` (RFC 7440) granted; a larger request is answered with this.
    pub max_windowsize: u16,
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
            max_windowsize: 64,
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
        Err(FileError::Unverified(why)) => {
            // The message (file, expected and actual digest) fits one packet.
            let why: String = why.chars().take(400).collect();
            let _ = socket.send(&error_packet(ERR_ACCESS, &why)).await;
            return "refused";
        }
    };

    // Options: answer the ones understood, in an OACK (RFC 2347).
    let mut blksize = DEFAULT_BLKSIZE;
    let mut timeout = config.timeout;
    let mut window: Option<u16> = None;
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
            "windowsize" => {
                // RFC 7440: 1..=65535; 0 or garbage is ignored (left out of the OACK). The
                // answer may be smaller than asked: bounded below after blksize is known.
                if let Ok(n @ 1..) = v.parse::<u16>() {
                    window = Some(n.min(config.max_windowsize.max(1)));
                }
            }
            _ => {}
        }
    }
    if let Some(w) = window.as_mut() {
        *w = (*w).min(u16::try_from(window_cap(blksize)).unwrap_or(u16::MAX));
        oack.push(("windowsize".into(), w.to_string()));
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

    let window = window.map_or(1, |w| usize::from(w).min(window_cap(blksize)));
    let mut sender = Window::new(blksize, window);
    let mut packet = Vec::with_capacity(4 + blksize);
    let mut retries = 0u32;
    // At most one early resend per round on an ACK that acknowledges nothing new (a windowed
    // client's "resend from here"), so delayed duplicates cannot snowball.
    let mut early_resend_used = false;
    loop {
        if let Err(error) = sender.fill(&mut file).await {
            tracing::warn!(%peer, file = %req.file, %error, "TFTP read error");
            let _ = socket
                .send(&error_packet(ERR_NOT_DEFINED, "read error"))
                .await;
            return "error";
        }
        for i in 0..sender.blocks() {
            sender.packet(i, &mut packet);
            if socket.send(&packet).await.is_err() {
                return "error";
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        // Wait for an ACK that moves the window, or the timeout.
        let acked = loop {
            let n = match tokio::time::timeout_at(deadline, socket.recv(&mut recv)).await {
                Err(_) => break None,
                Ok(Err(_)) => return "error",
                Ok(Ok(n)) => n,
            };
            let Some([a, b, c, d, ..]) = recv.get(..n) else {
                continue; // not a packet of this protocol
            };
            match u16::from_be_bytes([*a, *b]) {
                ACK => match sender.acked(u16::from_be_bytes([*c, *d])) {
                    Some(0) if window > 1 && !early_resend_used => {
                        early_resend_used = true;
                        break Some(0);
                    }
                    // An old block's ACK again: wait for ours, do not resend.
                    Some(0) | None => {}
                    Some(k) => break Some(k),
                },
                ERROR => return "client_error",
                _ => {
                    let _ = socket
                        .send(&error_packet(ERR_ILLEGAL, "unexpected packet"))
                        .await;
                    return "error";
                }
            }
        };
        match acked {
            None => {
                retries += 1;
                if retries > config.retries {
                    return "timeout";
                }
                tracing::trace!(%peer, block = sender.base_block(), "TFTP window sent again");
            }
            Some(0) => {
                tracing::trace!(%peer, block = sender.base_block(), "TFTP window sent again on the client's ACK");
            }
            Some(k) => {
                retries = 0;
                early_resend_used = false;
                let (bytes, last) = sender.advance(k);
                metrics.tftp_bytes.inc_by(bytes as u64);
                if last {
                    return "ok";
                }
            }
        }
    }
}

/// The largest window the server holds for one transfer: [`MAX_WINDOW_BYTES`] of data, and at
/// least one block.
fn window_cap(blksize: usize) -> usize {
    (MAX_WINDOW_BYTES / blksize.max(1)).max(1)
}

/// The blocks of a transfer that are sent and not yet acknowledged (RFC 7440): the data of
/// `window` blocks from `base` (the absolute block number, from 1; the wire number is its low 16
/// bits, so numbers wrap after 65535).
struct Window {
    blksize: usize,
    window: usize,
    /// Absolute number of the first block in `data`.
    base: u64,
    data: Vec<u8>,
    /// The file has no more bytes than those in `data`.
    eof: bool,
}

impl Window {
    fn new(blksize: usize, window: usize) -> Self {
        Self {
            blksize,
            window,
            base: 1,
            data: Vec::with_capacity((blksize * window).max(READ_AHEAD)),
            eof: false,
        }
    }

    /// Reads when the window is not full (and the file has more): up to [`READ_AHEAD`] or a
    /// window, whichever is more, so a small window does not cost a trip through the blocking
    /// pool per block.
    async fn fill(&mut self, file: &mut tokio::fs::File) -> std::io::Result<()> {
        let have = self.data.len();
        if self.eof || have >= self.blksize * self.window {
            return Ok(());
        }
        let want = (self.blksize * self.window).max(READ_AHEAD);
        self.data.resize(want, 0);
        let n = read_full(file, &mut self.data[have..]).await;
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                self.data.truncate(have);
                return Err(e);
            }
        };
        self.data.truncate(have + n);
        if have + n < want {
            self.eof = true;
        }
        Ok(())
    }

    /// Blocks in the window: full ones, and the last (short, maybe empty) one once the file
    /// has ended.
    fn blocks(&self) -> usize {
        let full = self.data.len() / self.blksize;
        if self.eof {
            (full + 1).min(self.window)
        } else {
            full.min(self.window)
        }
    }

    /// The wire number of the first block of the window.
    fn base_block(&self) -> u16 {
        wire(self.base)
    }

    /// Block `i` of the window as a DATA packet in `out`.
    fn packet(&self, i: usize, out: &mut Vec<u8>) {
        let start = (i * self.blksize).min(self.data.len());
        let end = (start + self.blksize).min(self.data.len());
        out.clear();
        out.extend_from_slice(&DATA.to_be_bytes());
        out.extend_from_slice(&wire(self.base + i as u64).to_be_bytes());
        out.extend_from_slice(&self.data[start..end]);
    }

    /// How many blocks of the window an ACK of wire number `num` acknowledges: `Some(0)` for
    /// the block before the window (nothing new), `None` for a number outside it.
    fn acked(&self, num: u16) -> Option<usize> {
        let k = usize::from(num.wrapping_sub(wire(self.base.wrapping_sub(1))));
        (k <= self.blocks()).then_some(k)
    }

    /// Drops the first `k` acknowledged blocks: their data bytes, and whether the last block
    /// of the file was among them.
    fn advance(&mut self, k: usize) -> (usize, bool) {
        let last = self.eof && k * self.blksize > self.data.len();
        let bytes = (k * self.blksize).min(self.data.len());
        self.data.drain(..bytes);
        self.base += k as u64;
        (bytes, last)
    }
}

fn wire(block: u64) -> u16 {
    (block & 0xffff) as u16
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
