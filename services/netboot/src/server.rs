//! The DHCP socket loop: receive, answer from the index with [`Responder`], send.

use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::dhcp::{self, Ignored, Responder};
use crate::index::Index;
use crate::metrics::Metrics;

/// Why a socket could not be set up.
#[derive(Debug)]
pub enum SocketError {
    /// SO_BINDTODEVICE failed.
    Device(std::io::Error),
    /// Creating or binding failed.
    Bind(std::io::Error),
}

/// A non-blocking UDP socket bound to `addr`, with SO_REUSEADDR, SO_BROADCAST when
/// `broadcast`, and SO_BINDTODEVICE when `device` is given (so several instances can serve
/// port 67 on different interfaces, and broadcasts leave by the right one).
pub fn udp_socket(
    addr: SocketAddr,
    device: Option<&str>,
    broadcast: bool,
) -> Result<UdpSocket, SocketError> {
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(SocketError::Bind)?;
    s.set_reuse_address(true).map_err(SocketError::Bind)?;
    if broadcast {
        s.set_broadcast(true).map_err(SocketError::Bind)?;
    }
    if let Some(d) = device.filter(|d| !d.is_empty()) {
        s.bind_device(Some(d.as_bytes()))
            .map_err(SocketError::Device)?;
    }
    s.set_nonblocking(true).map_err(SocketError::Bind)?;
    s.bind(&addr.into()).map_err(SocketError::Bind)?;
    UdpSocket::from_std(s.into()).map_err(SocketError::Bind)
}

/// Answers DHCP on `socket` until `shutdown`. Packets are handled one at a time in arrival
/// order (a lookup is a hash read; one core answers far more than a segment sends).
pub async fn serve_dhcp(
    socket: UdpSocket,
    responder: Arc<Responder>,
    index: Arc<Index>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let local = socket.local_addr()?;
    tracing::info!(addr = %local, mode = ?responder.config().mode, "DHCP listening");
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            r = socket.recv_from(&mut buf) => match r {
                Ok(r) => r,
                Err(error) => {
                    tracing::debug!(%error, "DHCP receive error");
                    continue;
                }
            },
        };
        let Some(packet) = buf.get(..n) else { continue };
        let req = match dhcp::parse(packet) {
            Ok(r) => r,
            Err(why) => {
                tracing::debug!(%from, bytes = n, reason = why.label(), "DHCP packet dropped");
                metrics.received("invalid");
                metrics.ignored(why.label());
                continue;
            }
        };
        metrics.received(dhcp::type_label(req.kind));
        if !index.synced() {
            tracing::debug!(%from, "DHCP packet before the Hardware index is loaded");
            metrics.ignored("not_ready");
            continue;
        }
        let mac = dhcp::mac_string(&req.mac);
        match responder.respond(&req, from, local.port(), |m| index.by_mac(m)) {
            Ok(reply) => match socket.send_to(&reply.bytes, reply.to).await {
                Ok(_) => {
                    metrics.replied(dhcp::type_label(reply.kind));
                    tracing::info!(
                        %mac,
                        request = dhcp::type_label(req.kind),
                        reply = dhcp::type_label(reply.kind),
                        yiaddr = %reply.yiaddr,
                        boot_file = reply.boot_file.as_deref().unwrap_or(""),
                        to = %reply.to,
                        "DHCP answered"
                    );
                }
                Err(error) => {
                    metrics.dhcp_send_errors.inc();
                    tracing::warn!(%mac, to = %reply.to, %error, "cannot send the DHCP reply");
                }
            },
            Err(why) => {
                metrics.ignored(why.label());
                match why {
                    Ignored::ConflictingMac => tracing::warn!(
                        %mac,
                        "several Hardware claim this MAC; not answered"
                    ),
                    _ => tracing::debug!(
                        %mac,
                        request = dhcp::type_label(req.kind),
                        reason = why.label(),
                        "DHCP packet not answered"
                    ),
                }
            }
        }
    }
}
