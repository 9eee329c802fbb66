//! The DHCPv4 packet logic, free of sockets: bytes in, a reply and where to send it (or why
//! there is none) out. [`Responder::handle`] never panics, whatever the bytes.
//!
//! Two modes:
//! - [`DhcpMode::Reservation`]: the only DHCP server of the segment for the machines it knows.
//!   A MAC that exactly one Hardware owns gets that interface's `dhcp` values (address, mask,
//!   router, DNS, host name, NTP, lease time); any other MAC gets nothing.
//! - [`DhcpMode::Proxy`]: another server leases addresses; PXE firmware and iPXE of known
//!   machines get only the boot information (proxyDHCP, PXE specification 2.1: no `yiaddr`,
//!   vendor class `PXEClient`, option 43 telling the firmware to boot the file given).
//!   With [`DhcpConfig::discovery`] (off by default), a PXE or iPXE client whose MAC no
//!   Hardware owns gets the same boot information, and iPXE the script of its MAC
//!   ([`discovery_script_url`]: Hegel serves unknown machines the discovery OSIE), so it can
//!   boot the OSIE and enroll. Addresses still come from the site's DHCP server: a flood of
//!   requests from made-up MACs costs replies, never a lease or a Hardware.
//!
//! The boot information (as Smee chooses it): iPXE (user class `iPXE` or `Tinkerbell`) gets the
//! iPXE script URL; PXE firmware (vendor class `PXEClient...`) gets an iPXE binary by TFTP chosen
//! by its architecture (option 93); UEFI HTTP boot (vendor class `HTTPClient...`) gets the same
//! binary by HTTP. Clients that are neither (an OS's DHCP client) get just the lease, and so does
//! an interface with `disableNetboot`.
//!
//! VLANs: the Hardware's `vlanId` is not sent in DHCP (Smee does not either): Hegel puts it in
//! the iPXE script (`vlan_id=`) for the OSIE.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use dhcproto::v4::{
    self, DhcpOption, DhcpOptions, Flags, HType, Message, MessageType, Opcode, OptionCode,
};
use dhcproto::{Decodable as _, Decoder, Encodable as _, Encoder};

use crate::index::Lookup;
use crate::machine::Interface;

/// The BOOTP/DHCP server port.
pub const SERVER_PORT: u16 = 67;
/// The BOOTP/DHCP client port.
pub const CLIENT_PORT: u16 = 68;
/// The PXE boot server port (proxyDHCP requests after the first exchange).
pub const PXE_PORT: u16 = 4011;
/// Lease time when the Hardware has none (Hardware's own default is 86400 as well).
pub const DEFAULT_LEASE_SECONDS: u32 = 86_400;

const MAGIC: [u8; 4] = [99, 130, 83, 99];
/// Largest length of the BOOTP `file` field that still leaves its terminating NUL.
const FILE_FIELD: usize = 127;
/// Largest length of the BOOTP `sname` field that still leaves its terminating NUL.
const SNAME_FIELD: usize = 63;

/// How the DHCP server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DhcpMode {
    /// Leases the reserved address of each known MAC, plus boot information.
    #[default]
    Reservation,
    /// Another server leases addresses; only boot information for PXE clients.
    Proxy,
}

/// The iPXE binary to hand out per client architecture (option 93, RFC 4578).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootFiles {
    /// Architecture 0 (x86 BIOS).
    pub bios: String,
    /// Architectures 6, 7 and 9 (x86 and x86-64 UEFI).
    pub efi_x86_64: String,
    /// Architecture 11 (arm64 UEFI) and 10 (arm32 UEFI).
    pub efi_arm64: String,
}

impl Default for BootFiles {
    fn default() -> Self {
        Self {
            bios: "undionly.kpxe".into(),
            efi_x86_64: "ipxe.efi".into(),
            efi_arm64: "snp.efi".into(),
        }
    }
}

impl BootFiles {
    /// The file for architecture `arch`; unknown architectures get the BIOS one (Smee's
    /// choice: most firmware that sends nothing or an odd value is a legacy PXE ROM).
    pub fn for_arch(&self, arch: u16) -> &str {
        match arch {
            6 | 7 | 9 => &self.efi_x86_64,
            10 | 11 => &self.efi_arm64,
            // 16 is x86-64 UEFI HTTP boot; 19 arm64 UEFI HTTP boot.
            16 => &self.efi_x86_64,
            19 => &self.efi_arm64,
            _ => &self.bios,
        }
    }
}

/// What the responder needs to know about this server.
#[derive(Clone, Debug)]
pub struct DhcpConfig {
    /// Reservation or proxy.
    pub mode: DhcpMode,
    /// This server's address: server identifier (54), `siaddr` and TFTP server (66).
    pub server_ip: Ipv4Addr,
    /// The iPXE script URL handed to iPXE clients.
    pub ipxe_script_url: String,
    /// Base URL of the HTTP file server (UEFI HTTP boot clients get `{base}/{file}`); no HTTP
    /// boot answers when `None`.
    pub http_base_url: Option<String>,
    /// Boot file names per architecture.
    pub boot_files: BootFiles,
    /// Lease time for Hardware without one.
    pub default_lease_seconds: u32,
    /// Discovery (proxy mode only): boot information for MACs no Hardware owns.
    pub discovery: bool,
}

/// The iPXE script URL of the machine with `mac` on the server of `script_url` (Hegel's
/// `/ipxe/script/{mac}/auto.ipxe`, same scheme, host and port): an unknown machine has no
/// address Hegel could know it by.
pub fn discovery_script_url(script_url: &str, mac: &str) -> String {
    let origin = match script_url.find("://") {
        Some(i) => {
            let rest = &script_url[i + 3..];
            let end = rest.find('/').map_or(script_url.len(), |j| i + 3 + j);
            &script_url[..end]
        }
        None => script_url.split('/').next().unwrap_or_default(),
    };
    format!("{origin}/ipxe/script/{mac}/auto.ipxe")
}

/// Why a packet got no reply (the `reason` label of the ignored-packets metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ignored {
    /// Not a DHCP message at all (too short, bad magic cookie, bad options).
    Malformed,
    /// A BOOTREPLY (another server's answer) or an unsupported hardware type/length.
    NotARequest,
    /// A BOOTP request without a DHCP message type.
    NoMessageType,
    /// DECLINE, RELEASE, or a type a server never receives.
    UnhandledType,
    /// No Hardware has this MAC.
    UnknownMac,
    /// Several Hardware claim this MAC.
    ConflictingMac,
    /// The interface has `disableDhcp`.
    DhcpDisabled,
    /// The interface has no IPv4 `dhcp.ip` (reservation mode).
    NoReservation,
    /// The REQUEST names another server: the client took someone else's offer.
    OtherServer,
    /// proxyDHCP: not a PXE or iPXE client.
    NotPxe,
    /// proxyDHCP: the interface may not netboot.
    NetbootDisabled,
    /// The reply could not be encoded.
    EncodeFailed,
}

impl Ignored {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::NotARequest => "not_a_request",
            Self::NoMessageType => "no_message_type",
            Self::UnhandledType => "unhandled_type",
            Self::UnknownMac => "unknown_mac",
            Self::ConflictingMac => "conflicting_mac",
            Self::DhcpDisabled => "dhcp_disabled",
            Self::NoReservation => "no_reservation",
            Self::OtherServer => "other_server",
            Self::NotPxe => "not_pxe",
            Self::NetbootDisabled => "netboot_disabled",
            Self::EncodeFailed => "encode_failed",
        }
    }
}

/// A reply to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The encoded message.
    pub bytes: Vec<u8>,
    /// Where to send it.
    pub to: SocketAddrV4,
    /// OFFER, ACK or NAK (for metrics and logs).
    pub kind: MessageType,
    /// The reply's `yiaddr`.
    pub yiaddr: Ipv4Addr,
    /// The boot file name given, if any.
    pub boot_file: Option<String>,
}

/// What the client is, from its options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientKind {
    /// iPXE (user class `iPXE` or `Tinkerbell`): gets the script URL.
    Ipxe,
    /// PXE firmware (vendor class `PXEClient...`) with this architecture: gets a binary by TFTP.
    Pxe(u16),
    /// UEFI HTTP boot (vendor class `HTTPClient...`): gets a binary by HTTP.
    Http(u16),
    /// Anything else: just a lease.
    Plain,
}

/// The client kind of `msg`.
pub fn client_kind(msg: &Message) -> ClientKind {
    let opts = msg.opts();
    if let Some(DhcpOption::UserClass(uc)) = opts.get(OptionCode::UserClass) {
        // iPXE sends the bare string; RFC 3004 clients prefix each class with its length.
        let bare = uc.as_slice();
        let first = uc
            .split_first()
            .and_then(|(len, rest)| rest.get(..usize::from(*len)));
        if [Some(bare), first]
            .into_iter()
            .flatten()
            .any(|c| c == b"iPXE" || c == b"Tinkerbell")
        {
            return ClientKind::Ipxe;
        }
    }
    let vendor = match opts.get(OptionCode::ClassIdentifier) {
        Some(DhcpOption::ClassIdentifier(v)) => v.as_slice(),
        _ => &[],
    };
    let arch = match opts.get(OptionCode::ClientSystemArchitecture) {
        Some(DhcpOption::ClientSystemArchitecture(a)) => u16::from(*a),
        // `PXEClient:Arch:00007:UNDI:...` carries it too.
        _ => std::str::from_utf8(vendor)
            .ok()
            .and_then(|v| v.split(':').nth(2))
            .and_then(|a| a.parse().ok())
            .unwrap_or(0),
    };
    if vendor.starts_with(b"PXEClient") {
        ClientKind::Pxe(arch)
    } else if vendor.starts_with(b"HTTPClient") {
        ClientKind::Http(arch)
    } else {
        ClientKind::Plain
    }
}

/// The lower-case `aa:bb:cc:dd:ee:ff` form of a 6-byte MAC (the Hardware key format).
pub fn mac_string(mac: &[u8; 6]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(17);
    for (i, b) in mac.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

/// A decoded, checked request: the message, its type and the client MAC.
#[derive(Debug)]
pub struct Request {
    /// The message.
    pub msg: Message,
    /// Its DHCP message type.
    pub kind: MessageType,
    /// The client hardware address.
    pub mac: [u8; 6],
}

/// The options this server reads, each with the lengths it accepts.
fn option_ok(code: u8, len: usize) -> bool {
    match code {
        // message type
        53 => len == 1,
        // requested address, server identifier
        50 | 54 => len == 4,
        // client architecture: a list of 16-bit types (the first one is used)
        93 => len >= 2 && len.is_multiple_of(2),
        // parameter request list, vendor class, client identifier, user class, machine UUID
        55 | 60 | 61 | 77 | 97 => len >= 1,
        _ => false,
    }
}

/// The packet with only the options this server reads, each checked for its length and kept
/// once (the first occurrence; option 93 shortened to its first type), in a fresh options
/// area. dhcproto 0.14's option decoder asserts the lengths of some options (94, 80, 152-155:
/// a panic in debug builds, a misread in release ones; the property test below found it), so
/// raw options never reach it. `None` when the options are cut short.
fn sanitize(bytes: &[u8]) -> Option<Vec<u8>> {
    let head = bytes.get(..240)?;
    let opts = bytes.get(240..)?;
    let mut out = Vec::with_capacity(bytes.len().min(576));
    out.extend_from_slice(head);
    let mut seen = [false; 256];
    let mut i = 0usize;
    while let Some(&code) = opts.get(i) {
        match code {
            0 => {
                i += 1;
                continue;
            }
            255 => break,
            _ => {}
        }
        let len = usize::from(*opts.get(i + 1)?);
        let value = opts.get(i + 2..i + 2 + len)?;
        i += 2 + len;
        let first = !std::mem::replace(&mut seen[usize::from(code)], true);
        if first && option_ok(code, len) {
            let value = if code == 93 { &value[..2] } else { value };
            out.push(code);
            // `value` is at most 255 bytes: it was read with a one-byte length.
            out.push(u8::try_from(value.len()).ok()?);
            out.extend_from_slice(value);
        }
    }
    out.push(255);
    Some(out)
}

/// Decodes `bytes` as a DHCP request from an Ethernet client.
pub fn parse(bytes: &[u8]) -> Result<Request, Ignored> {
    if bytes.len() < 240 || bytes.get(236..240) != Some(&MAGIC[..]) {
        return Err(Ignored::Malformed);
    }
    let clean = sanitize(bytes).ok_or(Ignored::Malformed)?;
    let msg = Message::decode(&mut Decoder::new(&clean)).map_err(|_| Ignored::Malformed)?;
    if msg.opcode() != Opcode::BootRequest || msg.htype() != HType::Eth || msg.hlen() != 6 {
        return Err(Ignored::NotARequest);
    }
    // hlen is 6, so `chaddr()` is 6 bytes (it slices by hlen; checked above, never > 16).
    let mac: [u8; 6] = msg.chaddr().try_into().map_err(|_| Ignored::NotARequest)?;
    let kind = msg.opts().msg_type().ok_or(Ignored::NoMessageType)?;
    Ok(Request { msg, kind, mac })
}

/// Answers DHCP packets from the Hardware index.
#[derive(Clone, Debug)]
pub struct Responder {
    config: DhcpConfig,
}

enum Verdict {
    Ack,
    Nak,
}

impl Responder {
    /// A responder for `config`.
    pub fn new(config: DhcpConfig) -> Self {
        Self { config }
    }

    /// The configuration.
    pub fn config(&self) -> &DhcpConfig {
        &self.config
    }

    /// The reply to `bytes` received from `from` on local port `local_port`, looking machines up
    /// with `lookup` (a lower-case MAC to [`Lookup`]).
    pub fn handle(
        &self,
        bytes: &[u8],
        from: SocketAddr,
        local_port: u16,
        lookup: impl FnOnce(&str) -> Lookup,
    ) -> Result<Reply, Ignored> {
        let req = parse(bytes)?;
        self.respond(&req, from, local_port, lookup)
    }

    /// The reply to an already parsed request (see [`Responder::handle`]).
    pub fn respond(
        &self,
        req: &Request,
        from: SocketAddr,
        local_port: u16,
        lookup: impl FnOnce(&str) -> Lookup,
    ) -> Result<Reply, Ignored> {
        match req.kind {
            MessageType::Discover | MessageType::Request | MessageType::Inform => {}
            _ => return Err(Ignored::UnhandledType),
        }
        let client = client_kind(&req.msg);
        if self.config.mode == DhcpMode::Proxy && client == ClientKind::Plain {
            return Err(Ignored::NotPxe);
        }
        let mac = mac_string(&req.mac);
        let (machine, index) = match lookup(&mac) {
            Lookup::Found(m, i) => (m, i),
            Lookup::Unknown if self.config.discovery && self.config.mode == DhcpMode::Proxy => {
                let script = discovery_script_url(&self.config.ipxe_script_url, &mac);
                return self.proxy(req, &client, from, local_port, &script);
            }
            Lookup::Unknown => return Err(Ignored::UnknownMac),
            Lookup::Conflict(_) => return Err(Ignored::ConflictingMac),
        };
        let iface = machine.interface(index).ok_or(Ignored::UnknownMac)?;
        if iface.disable_dhcp {
            return Err(Ignored::DhcpDisabled);
        }
        match self.config.mode {
            DhcpMode::Reservation => self.reservation(req, iface, &client, from, local_port),
            DhcpMode::Proxy => {
                if !iface.netboot_allowed() {
                    return Err(Ignored::NetbootDisabled);
                }
                let script = self.config.ipxe_script_url.clone();
                self.proxy(req, &client, from, local_port, &script)
            }
        }
    }

    fn reservation(
        &self,
        req: &Request,
        iface: &Interface,
        client: &ClientKind,
        from: SocketAddr,
        local_port: u16,
    ) -> Result<Reply, Ignored> {
        let ip = iface.ip.ok_or(Ignored::NoReservation)?;
        let msg = &req.msg;
        let requested = match msg.opts().get(OptionCode::RequestedIpAddress) {
            Some(DhcpOption::RequestedIpAddress(a)) => Some(*a),
            _ => None,
        };
        let server_id = match msg.opts().get(OptionCode::ServerIdentifier) {
            Some(DhcpOption::ServerIdentifier(a)) => Some(*a),
            _ => None,
        };
        let (kind, verdict) = match req.kind {
            MessageType::Discover => (MessageType::Offer, Verdict::Ack),
            MessageType::Inform => (MessageType::Ack, Verdict::Ack),
            _ => {
                // RFC 2131 4.3.2: SELECTING names a server; INIT-REBOOT asks for an address;
                // RENEWING/REBINDING have it in ciaddr.
                if server_id.is_some_and(|s| s != self.config.server_ip) {
                    return Err(Ignored::OtherServer);
                }
                let asked =
                    requested.or_else(|| (!msg.ciaddr().is_unspecified()).then_some(msg.ciaddr()));
                match asked {
                    Some(a) if a != ip => (MessageType::Nak, Verdict::Nak),
                    _ => (MessageType::Ack, Verdict::Ack),
                }
            }
        };
        let mut reply = self.base_reply(msg, &req.mac, kind);
        if let Verdict::Nak = verdict {
            // A NAK carries no address or configuration, and goes to everyone (RFC 2131 4.1).
            let to = if msg.giaddr().is_unspecified() {
                SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
            } else {
                reply.set_flags(msg.flags().set_broadcast());
                SocketAddrV4::new(msg.giaddr(), SERVER_PORT)
            };
            return self.finish(reply, to, kind, None);
        }
        let inform = req.kind == MessageType::Inform;
        if !inform {
            reply.set_yiaddr(ip);
        }
        let opts = reply.opts_mut();
        if !inform {
            let lease = iface
                .lease_time
                .unwrap_or(self.config.default_lease_seconds)
                .max(1);
            opts.insert(DhcpOption::AddressLeaseTime(lease));
            opts.insert(DhcpOption::Renewal(lease / 2));
            opts.insert(DhcpOption::Rebinding(lease / 8 * 7));
        }
        if let Some(mask) = iface.netmask {
            opts.insert(DhcpOption::SubnetMask(mask));
            if let Some(b) = broadcast_of(ip, mask) {
                opts.insert(DhcpOption::BroadcastAddr(b));
            }
        }
        if let Some(gw) = iface.gateway {
            opts.insert(DhcpOption::Router(vec![gw]));
        }
        if !iface.nameservers.is_empty() {
            opts.insert(DhcpOption::DomainNameServer(iface.nameservers.clone()));
        }
        if !iface.timeservers.is_empty() {
            opts.insert(DhcpOption::NtpServers(iface.timeservers.clone()));
        }
        if let Some(h) = &iface.hostname {
            opts.insert(DhcpOption::Hostname(h.clone()));
        }
        let boot_file = if iface.netboot_allowed() {
            let script = self.config.ipxe_script_url.clone();
            self.boot_info(&mut reply, msg, client, false, &script)
        } else {
            None
        };
        let to = self.destination(msg, from, local_port, inform);
        self.finish(reply, to, kind, boot_file)
    }

    fn proxy(
        &self,
        req: &Request,
        client: &ClientKind,
        from: SocketAddr,
        local_port: u16,
        script_url: &str,
    ) -> Result<Reply, Ignored> {
        let kind = match req.kind {
            MessageType::Discover => MessageType::Offer,
            MessageType::Request | MessageType::Inform => {
                // A REQUEST on port 67 selecting another server's lease is not for us to ACK
                // (the leasing server answers it); on 4011 it is the PXE boot server request.
                if local_port != PXE_PORT && req.kind == MessageType::Request {
                    let server_id = match req.msg.opts().get(OptionCode::ServerIdentifier) {
                        Some(DhcpOption::ServerIdentifier(a)) => Some(*a),
                        _ => None,
                    };
                    if server_id != Some(self.config.server_ip) {
                        return Err(Ignored::OtherServer);
                    }
                }
                MessageType::Ack
            }
            _ => return Err(Ignored::UnhandledType),
        };
        let msg = &req.msg;
        let mut reply = self.base_reply(msg, &req.mac, kind);
        let boot_file = self.boot_info(&mut reply, msg, client, true, script_url);
        let to = self.destination(msg, from, local_port, false);
        self.finish(reply, to, kind, boot_file)
    }

    /// BOOTREPLY with the request's xid, flags, giaddr and MAC, and the server identifier.
    fn base_reply(&self, msg: &Message, mac: &[u8; 6], kind: MessageType) -> Message {
        let mut reply = Message::default();
        reply
            .set_opcode(Opcode::BootReply)
            .set_htype(HType::Eth)
            .set_xid(msg.xid())
            .set_flags(msg.flags())
            .set_giaddr(msg.giaddr())
            .set_chaddr(mac);
        if kind == MessageType::Ack && !msg.ciaddr().is_unspecified() {
            reply.set_ciaddr(msg.ciaddr());
        }
        let mut opts = DhcpOptions::default();
        opts.insert(DhcpOption::MessageType(kind));
        opts.insert(DhcpOption::ServerIdentifier(self.config.server_ip));
        reply.set_opts(opts);
        reply
    }

    /// Adds the boot information for `client` to `reply`; returns the boot file name given.
    fn boot_info(
        &self,
        reply: &mut Message,
        msg: &Message,
        client: &ClientKind,
        proxy: bool,
        script_url: &str,
    ) -> Option<String> {
        let file = match client {
            ClientKind::Plain => return None,
            ClientKind::Ipxe => script_url.to_string(),
            ClientKind::Pxe(arch) => self.config.boot_files.for_arch(*arch).to_owned(),
            ClientKind::Http(arch) => {
                let base = self.config.http_base_url.as_deref()?;
                format!(
                    "{}/{}",
                    base.trim_end_matches('/'),
                    self.config.boot_files.for_arch(*arch)
                )
            }
        };
        if file.is_empty() {
            return None;
        }
        let server = self.config.server_ip.to_string();
        reply.set_siaddr(self.config.server_ip);
        if server.len() <= SNAME_FIELD {
            reply.set_sname_str(&server);
        }
        if file.len() <= FILE_FIELD {
            reply.set_fname_str(&file);
        }
        let opts = reply.opts_mut();
        opts.insert(DhcpOption::TFTPServerName(server.into_bytes()));
        opts.insert(DhcpOption::BootfileName(file.clone().into_bytes()));
        match client {
            ClientKind::Http(_) => {
                opts.insert(DhcpOption::ClassIdentifier(b"HTTPClient".to_vec()));
            }
            ClientKind::Pxe(_) | ClientKind::Ipxe => {
                opts.insert(DhcpOption::ClassIdentifier(b"PXEClient".to_vec()));
                if proxy || matches!(client, ClientKind::Pxe(_)) {
                    // PXE vendor options: discovery control (6) = 8, boot the file given
                    // without a boot server menu or multicast discovery.
                    opts.insert(DhcpOption::VendorExtensions(vec![6, 1, 8, 255]));
                }
            }
            ClientKind::Plain => {}
        }
        // PXE clients expect their machine identifier (UUID, option 97) back.
        if let Some(DhcpOption::ClientMachineIdentifier(id)) =
            msg.opts().get(OptionCode::ClientMachineIdentifier)
        {
            opts.insert(DhcpOption::ClientMachineIdentifier(id.clone()));
        }
        Some(file)
    }

    /// RFC 2131 4.1: to the relay, to the client's address, else broadcast (this server does
    /// not write the ARP table to unicast to an address the client does not have yet).
    fn destination(
        &self,
        msg: &Message,
        from: SocketAddr,
        local_port: u16,
        inform: bool,
    ) -> SocketAddrV4 {
        if !msg.giaddr().is_unspecified() {
            return SocketAddrV4::new(msg.giaddr(), SERVER_PORT);
        }
        if local_port == PXE_PORT || inform {
            // The PXE boot server request and INFORM come from a configured client: answer it
            // where it asked from.
            if let SocketAddr::V4(v4) = from
                && !v4.ip().is_unspecified()
            {
                return v4;
            }
        }
        if !msg.ciaddr().is_unspecified() {
            return SocketAddrV4::new(msg.ciaddr(), CLIENT_PORT);
        }
        SocketAddrV4::new(Ipv4Addr::BROADCAST, CLIENT_PORT)
    }

    fn finish(
        &self,
        reply: Message,
        to: SocketAddrV4,
        kind: MessageType,
        boot_file: Option<String>,
    ) -> Result<Reply, Ignored> {
        let mut bytes = Vec::with_capacity(576);
        reply
            .encode(&mut Encoder::new(&mut bytes))
            .map_err(|_| Ignored::EncodeFailed)?;
        // Some PXE ROMs drop replies shorter than a BOOTP message (300 bytes).
        if bytes.len() < 300 {
            bytes.resize(300, 0);
        }
        Ok(Reply {
            bytes,
            to,
            kind,
            yiaddr: reply.yiaddr(),
            boot_file,
        })
    }
}

fn broadcast_of(ip: Ipv4Addr, mask: Ipv4Addr) -> Option<Ipv4Addr> {
    let m = u32::from(mask);
    // Only contiguous masks shorter than /31 have a broadcast address.
    if m.leading_ones() + m.trailing_zeros() != 32 || m.trailing_zeros() < 2 {
        return None;
    }
    Some(Ipv4Addr::from(u32::from(ip) | !m))
}

/// The label of a message type for metrics.
pub fn type_label(kind: MessageType) -> &'static str {
    match kind {
        MessageType::Discover => "discover",
        MessageType::Offer => "offer",
        MessageType::Request => "request",
        MessageType::Decline => "decline",
        MessageType::Ack => "ack",
        MessageType::Nak => "nak",
        MessageType::Release => "release",
        MessageType::Inform => "inform",
        _ => "other",
    }
}

/// Builds a client request (tests, the benchmark and the fuzz target's seeds).
pub fn client_request(
    kind: MessageType,
    mac: [u8; 6],
    xid: u32,
    extra: impl IntoIterator<Item = DhcpOption>,
) -> Vec<u8> {
    let mut msg = Message::default();
    msg.set_opcode(Opcode::BootRequest)
        .set_xid(xid)
        .set_flags(Flags::default().set_broadcast())
        .set_chaddr(&mac);
    let opts = msg.opts_mut();
    opts.insert(DhcpOption::MessageType(kind));
    for o in extra {
        opts.insert(o);
    }
    let mut bytes = Vec::new();
    // Encoding a message built here cannot fail (every field is in range).
    let _ = msg.encode(&mut Encoder::new(&mut bytes));
    bytes
}

/// Decodes a reply (tests).
pub fn decode(bytes: &[u8]) -> Option<Message> {
    Message::decode(&mut Decoder::new(bytes)).ok()
}

pub use v4::Architecture;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;
    use serde_json::json;
    use std::sync::Arc;
    use tink_api::v1alpha2::Hardware;

    const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const SERVER: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);

    fn machine(iface: serde_json::Value) -> Arc<Machine> {
        let hw: Hardware = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m1", "namespace": "ns"},
            "spec": {"networkInterfaces": {"02:00:00:00:00:01": iface}},
        }))
        .expect("hardware");
        Arc::new(Machine::from_hardware(&hw))
    }

    fn full() -> Arc<Machine> {
        machine(
            json!({"dhcp": {"ip": "10.9.0.10", "netmask": "255.255.255.0",
            "gateway": "10.9.0.254", "hostname": "m1", "nameservers": ["10.9.0.53"],
            "timeservers": ["10.9.0.123"], "leaseTime": 3600}}),
        )
    }

    fn responder(mode: DhcpMode) -> Responder {
        Responder::new(DhcpConfig {
            mode,
            server_ip: SERVER,
            ipxe_script_url: "http://10.9.0.1:50061/ipxe/script/auto.ipxe".into(),
            http_base_url: Some("http://10.9.0.1:8080".into()),
            boot_files: BootFiles::default(),
            default_lease_seconds: DEFAULT_LEASE_SECONDS,
            discovery: false,
        })
    }

    fn from() -> SocketAddr {
        "0.0.0.0:68".parse().unwrap()
    }

    fn ask(
        r: &Responder,
        m: &Arc<Machine>,
        kind: MessageType,
        opts: Vec<DhcpOption>,
    ) -> Result<(Reply, Message), Ignored> {
        let bytes = client_request(kind, MAC, 0x1234, opts);
        let reply = r.handle(&bytes, from(), SERVER_PORT, |mac| {
            assert_eq!(mac, "02:00:00:00:00:01");
            Lookup::Found(m.clone(), 0)
        })?;
        let msg = decode(&reply.bytes).expect("reply decodes");
        Ok((reply, msg))
    }

    fn pxe(arch: u16) -> Vec<DhcpOption> {
        vec![
            DhcpOption::ClassIdentifier(format!("PXEClient:Arch:{arch:05}:UNDI:002001").into()),
            DhcpOption::ClientSystemArchitecture(Architecture::from(arch)),
        ]
    }

    /// The BOOTP `file` field (dhcproto keeps its NUL).
    fn fname(msg: &Message) -> &str {
        std::str::from_utf8(msg.fname().unwrap_or_default())
            .unwrap()
            .trim_end_matches('\0')
    }

    fn file(msg: &Message) -> Option<String> {
        match msg.opts().get(OptionCode::BootfileName) {
            Some(DhcpOption::BootfileName(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    #[test]
    fn discover_gets_an_offer_with_every_reserved_value() {
        let r = responder(DhcpMode::Reservation);
        let (reply, msg) = ask(&r, &full(), MessageType::Discover, vec![]).unwrap();
        assert_eq!(reply.kind, MessageType::Offer);
        assert_eq!(reply.to, "255.255.255.255:68".parse().unwrap());
        assert_eq!(msg.opcode(), Opcode::BootReply);
        assert_eq!(msg.xid(), 0x1234);
        assert_eq!(msg.chaddr(), MAC);
        assert_eq!(msg.yiaddr(), Ipv4Addr::new(10, 9, 0, 10));
        let o = msg.opts();
        assert_eq!(o.msg_type(), Some(MessageType::Offer));
        assert_eq!(
            o.get(OptionCode::ServerIdentifier),
            Some(&DhcpOption::ServerIdentifier(SERVER))
        );
        assert_eq!(
            o.get(OptionCode::SubnetMask),
            Some(&DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)))
        );
        assert_eq!(
            o.get(OptionCode::BroadcastAddr),
            Some(&DhcpOption::BroadcastAddr(Ipv4Addr::new(10, 9, 0, 255)))
        );
        assert_eq!(
            o.get(OptionCode::Router),
            Some(&DhcpOption::Router(vec![Ipv4Addr::new(10, 9, 0, 254)]))
        );
        assert_eq!(
            o.get(OptionCode::DomainNameServer),
            Some(&DhcpOption::DomainNameServer(vec![Ipv4Addr::new(
                10, 9, 0, 53
            )]))
        );
        assert_eq!(
            o.get(OptionCode::NtpServers),
            Some(&DhcpOption::NtpServers(vec![Ipv4Addr::new(10, 9, 0, 123)]))
        );
        assert_eq!(
            o.get(OptionCode::Hostname),
            Some(&DhcpOption::Hostname("m1".into()))
        );
        assert_eq!(
            o.get(OptionCode::AddressLeaseTime),
            Some(&DhcpOption::AddressLeaseTime(3600))
        );
        // A plain client: no boot information.
        assert_eq!(file(&msg), None);
        assert_eq!(msg.siaddr(), Ipv4Addr::UNSPECIFIED);
        assert!(reply.bytes.len() >= 300);
    }

    #[test]
    fn default_lease_when_the_hardware_has_none() {
        let r = responder(DhcpMode::Reservation);
        let m = machine(json!({"dhcp": {"ip": "10.9.0.11"}}));
        let (_, msg) = ask(&r, &m, MessageType::Discover, vec![]).unwrap();
        // The CRD defaults leaseTime to 86400; a zero one gets the configured default.
        assert_eq!(
            msg.opts().get(OptionCode::AddressLeaseTime),
            Some(&DhcpOption::AddressLeaseTime(86_400))
        );
        assert!(msg.opts().get(OptionCode::SubnetMask).is_none());
        assert!(msg.opts().get(OptionCode::Router).is_none());
    }

    #[test]
    fn request_for_the_reserved_address_is_acked_and_another_is_naked() {
        let r = responder(DhcpMode::Reservation);
        let m = full();
        let (reply, msg) = ask(
            &r,
            &m,
            MessageType::Request,
            vec![
                DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 9, 0, 10)),
                DhcpOption::ServerIdentifier(SERVER),
            ],
        )
        .unwrap();
        assert_eq!(reply.kind, MessageType::Ack);
        assert_eq!(msg.yiaddr(), Ipv4Addr::new(10, 9, 0, 10));
        let (reply, msg) = ask(
            &r,
            &m,
            MessageType::Request,
            vec![DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 9, 0, 99))],
        )
        .unwrap();
        assert_eq!(reply.kind, MessageType::Nak);
        assert_eq!(msg.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert!(msg.opts().get(OptionCode::AddressLeaseTime).is_none());
        assert_eq!(reply.to, "255.255.255.255:68".parse().unwrap());
        // The client chose another server's offer: stay quiet.
        assert_eq!(
            ask(
                &r,
                &m,
                MessageType::Request,
                vec![
                    DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 9, 0, 10)),
                    DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 9, 0, 2)),
                ],
            )
            .unwrap_err(),
            Ignored::OtherServer
        );
    }

    #[test]
    fn renewal_is_unicast_to_the_client() {
        let r = responder(DhcpMode::Reservation);
        let mut msg = Message::default();
        msg.set_opcode(Opcode::BootRequest)
            .set_chaddr(&MAC)
            .set_ciaddr(Ipv4Addr::new(10, 9, 0, 10))
            .opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Request));
        let mut bytes = Vec::new();
        msg.encode(&mut Encoder::new(&mut bytes)).unwrap();
        let m = full();
        let reply = r
            .handle(&bytes, "10.9.0.10:68".parse().unwrap(), 67, |_| {
                Lookup::Found(m.clone(), 0)
            })
            .unwrap();
        assert_eq!(reply.kind, MessageType::Ack);
        assert_eq!(reply.to, "10.9.0.10:68".parse().unwrap());
    }

    #[test]
    fn relayed_requests_are_answered_to_the_relay() {
        let r = responder(DhcpMode::Reservation);
        let mut msg = Message::default();
        msg.set_opcode(Opcode::BootRequest)
            .set_chaddr(&MAC)
            .set_giaddr(Ipv4Addr::new(10, 20, 0, 1))
            .opts_mut()
            .insert(DhcpOption::MessageType(MessageType::Discover));
        let mut bytes = Vec::new();
        msg.encode(&mut Encoder::new(&mut bytes)).unwrap();
        let m = full();
        let reply = r
            .handle(&bytes, "10.20.0.1:67".parse().unwrap(), 67, |_| {
                Lookup::Found(m.clone(), 0)
            })
            .unwrap();
        assert_eq!(reply.to, "10.20.0.1:67".parse().unwrap());
        assert_eq!(
            decode(&reply.bytes).unwrap().giaddr(),
            Ipv4Addr::new(10, 20, 0, 1)
        );
    }

    #[test]
    fn ipxe_gets_the_script_url() {
        let r = responder(DhcpMode::Reservation);
        let mut opts = pxe(7);
        opts.push(DhcpOption::UserClass(b"iPXE".to_vec()));
        let (reply, msg) = ask(&r, &full(), MessageType::Discover, opts).unwrap();
        let url = "http://10.9.0.1:50061/ipxe/script/auto.ipxe";
        assert_eq!(reply.boot_file.as_deref(), Some(url));
        assert_eq!(file(&msg).as_deref(), Some(url));
        assert_eq!(fname(&msg), url);
        assert_eq!(msg.siaddr(), SERVER);
        assert_eq!(msg.yiaddr(), Ipv4Addr::new(10, 9, 0, 10));
    }

    #[test]
    fn firmware_gets_the_binary_of_its_architecture() {
        let r = responder(DhcpMode::Reservation);
        for (arch, want) in [
            (0, "undionly.kpxe"),
            (6, "ipxe.efi"),
            (7, "ipxe.efi"),
            (9, "ipxe.efi"),
            (11, "snp.efi"),
        ] {
            let (_, msg) = ask(&r, &full(), MessageType::Discover, pxe(arch)).unwrap();
            assert_eq!(file(&msg).as_deref(), Some(want), "arch {arch}");
            assert_eq!(fname(&msg), want);
            assert_eq!(msg.siaddr(), SERVER, "next-server");
            assert_eq!(
                msg.opts().get(OptionCode::TFTPServerName),
                Some(&DhcpOption::TFTPServerName(b"10.9.0.1".to_vec()))
            );
            assert_eq!(
                msg.opts().get(OptionCode::ClassIdentifier),
                Some(&DhcpOption::ClassIdentifier(b"PXEClient".to_vec()))
            );
        }
        // No option 93: the architecture in the vendor class.
        let (_, msg) = ask(
            &r,
            &full(),
            MessageType::Discover,
            vec![DhcpOption::ClassIdentifier(
                b"PXEClient:Arch:00007:UNDI:003016".to_vec(),
            )],
        )
        .unwrap();
        assert_eq!(file(&msg).as_deref(), Some("ipxe.efi"));
        // UEFI HTTP boot: the binary by HTTP.
        let (_, msg) = ask(
            &r,
            &full(),
            MessageType::Discover,
            vec![DhcpOption::ClassIdentifier(
                b"HTTPClient:Arch:00016:UNDI:003001".to_vec(),
            )],
        )
        .unwrap();
        assert_eq!(file(&msg).as_deref(), Some("http://10.9.0.1:8080/ipxe.efi"));
    }

    #[test]
    fn disable_netboot_gets_the_lease_without_boot_information() {
        let r = responder(DhcpMode::Reservation);
        let m = machine(json!({"dhcp": {"ip": "10.9.0.12"}, "disableNetboot": true}));
        let mut opts = pxe(7);
        opts.push(DhcpOption::UserClass(b"iPXE".to_vec()));
        let (reply, msg) = ask(&r, &m, MessageType::Discover, opts).unwrap();
        assert_eq!(msg.yiaddr(), Ipv4Addr::new(10, 9, 0, 12));
        assert_eq!(reply.boot_file, None);
        assert_eq!(file(&msg), None);
        assert_eq!(msg.fname(), None);
        assert_eq!(msg.siaddr(), Ipv4Addr::UNSPECIFIED);
    }

    #[test]
    fn disable_dhcp_unknown_and_conflicting_macs_get_nothing() {
        let r = responder(DhcpMode::Reservation);
        let m = machine(json!({"dhcp": {"ip": "10.9.0.13"}, "disableDhcp": true}));
        assert_eq!(
            ask(&r, &m, MessageType::Discover, vec![]).unwrap_err(),
            Ignored::DhcpDisabled
        );
        let bytes = client_request(MessageType::Discover, MAC, 1, []);
        assert_eq!(
            r.handle(&bytes, from(), 67, |_| Lookup::Unknown)
                .unwrap_err(),
            Ignored::UnknownMac
        );
        assert_eq!(
            r.handle(&bytes, from(), 67, |_| Lookup::Conflict(vec![
                "a/b".into(),
                "c/d".into()
            ]))
            .unwrap_err(),
            Ignored::ConflictingMac
        );
        let m = machine(json!({}));
        assert_eq!(
            ask(&r, &m, MessageType::Discover, vec![]).unwrap_err(),
            Ignored::NoReservation
        );
    }

    #[test]
    fn release_decline_and_replies_are_ignored() {
        let r = responder(DhcpMode::Reservation);
        for t in [
            MessageType::Release,
            MessageType::Decline,
            MessageType::Offer,
        ] {
            assert_eq!(
                ask(&r, &full(), t, vec![]).unwrap_err(),
                Ignored::UnhandledType
            );
        }
        let mut bytes = client_request(MessageType::Offer, MAC, 1, []);
        bytes[0] = 2;
        assert_eq!(
            r.handle(&bytes, from(), 67, |_| Lookup::Unknown)
                .unwrap_err(),
            Ignored::NotARequest
        );
    }

    #[test]
    fn inform_gets_configuration_without_a_lease() {
        let r = responder(DhcpMode::Reservation);
        let (reply, msg) = ask(&r, &full(), MessageType::Inform, vec![]).unwrap();
        assert_eq!(reply.kind, MessageType::Ack);
        assert_eq!(msg.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert!(msg.opts().get(OptionCode::AddressLeaseTime).is_none());
        assert!(msg.opts().get(OptionCode::SubnetMask).is_some());
    }

    #[test]
    fn discovery_boots_unknown_macs_in_proxy_mode_only() {
        let unknown = |r: &Responder, opts: Vec<DhcpOption>| {
            let bytes = client_request(MessageType::Discover, MAC, 1, opts);
            r.handle(&bytes, from(), 67, |_| Lookup::Unknown)
        };
        // Off (the default): an unknown MAC gets nothing, in either mode.
        let off = responder(DhcpMode::Proxy);
        assert_eq!(unknown(&off, pxe(0)).unwrap_err(), Ignored::UnknownMac);
        let mut config = off.config().clone();
        config.discovery = true;
        let on = Responder::new(config.clone());
        // PXE firmware: the iPXE binary for its architecture, no address.
        let reply = unknown(&on, pxe(7)).unwrap();
        let msg = Message::decode(&mut Decoder::new(&reply.bytes)).unwrap();
        assert_eq!(msg.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert_eq!(file(&msg).as_deref(), Some("ipxe.efi"));
        // iPXE: the script of its own MAC (Hegel cannot know it by an address).
        let reply = unknown(&on, vec![DhcpOption::UserClass(b"iPXE".to_vec())]).unwrap();
        let msg = Message::decode(&mut Decoder::new(&reply.bytes)).unwrap();
        assert_eq!(
            file(&msg).as_deref(),
            Some(
                format!(
                    "http://10.9.0.1:50061/ipxe/script/{}/auto.ipxe",
                    mac_string(&MAC)
                )
                .as_str()
            )
        );
        // An OS's DHCP client is the site server's business.
        assert_eq!(unknown(&on, vec![]).unwrap_err(), Ignored::NotPxe);
        // Reservation mode never answers unknown MACs, discovery or not.
        config.mode = DhcpMode::Reservation;
        let reservation = Responder::new(config);
        assert_eq!(
            unknown(&reservation, pxe(0)).unwrap_err(),
            Ignored::UnknownMac
        );
    }

    #[test]
    fn discovery_script_urls_keep_the_servers_origin() {
        let mac = "52:54:00:0b:5e:02";
        assert_eq!(
            discovery_script_url("http://10.9.0.1:50061/ipxe/script/auto.ipxe", mac),
            "http://10.9.0.1:50061/ipxe/script/52:54:00:0b:5e:02/auto.ipxe"
        );
        assert_eq!(
            discovery_script_url("https://hegel.example/auto.ipxe", mac),
            "https://hegel.example/ipxe/script/52:54:00:0b:5e:02/auto.ipxe"
        );
        assert_eq!(
            discovery_script_url("http://10.9.0.1:50061", mac),
            "http://10.9.0.1:50061/ipxe/script/52:54:00:0b:5e:02/auto.ipxe"
        );
    }

    #[test]
    fn proxy_mode_gives_boot_information_and_no_address() {
        let r = responder(DhcpMode::Proxy);
        let mut opts = pxe(0);
        opts.push(DhcpOption::ClientMachineIdentifier(vec![0; 17]));
        let (reply, msg) = ask(&r, &full(), MessageType::Discover, opts).unwrap();
        assert_eq!(reply.kind, MessageType::Offer);
        assert_eq!(msg.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert_eq!(reply.yiaddr, Ipv4Addr::UNSPECIFIED);
        assert_eq!(file(&msg).as_deref(), Some("undionly.kpxe"));
        assert_eq!(msg.siaddr(), SERVER);
        assert!(msg.opts().get(OptionCode::AddressLeaseTime).is_none());
        assert!(msg.opts().get(OptionCode::SubnetMask).is_none());
        assert_eq!(
            msg.opts().get(OptionCode::VendorExtensions),
            Some(&DhcpOption::VendorExtensions(vec![6, 1, 8, 255]))
        );
        assert_eq!(
            msg.opts().get(OptionCode::ClientMachineIdentifier),
            Some(&DhcpOption::ClientMachineIdentifier(vec![0; 17]))
        );
        // Plain clients are the leasing server's business.
        assert_eq!(
            ask(&r, &full(), MessageType::Discover, vec![]).unwrap_err(),
            Ignored::NotPxe
        );
        // iPXE in proxy mode: the script, still no address.
        let (_, msg) = ask(
            &r,
            &full(),
            MessageType::Discover,
            vec![DhcpOption::UserClass(b"iPXE".to_vec())],
        )
        .unwrap();
        assert_eq!(msg.yiaddr(), Ipv4Addr::UNSPECIFIED);
        assert_eq!(
            file(&msg).as_deref(),
            Some("http://10.9.0.1:50061/ipxe/script/auto.ipxe")
        );
        // Netboot disabled: nothing at all in proxy mode.
        let m = machine(json!({"dhcp": {"ip": "10.9.0.12"}, "disableNetboot": true}));
        assert_eq!(
            ask(&r, &m, MessageType::Discover, pxe(7)).unwrap_err(),
            Ignored::NetbootDisabled
        );
        // The PXE boot server request on 4011 is answered where it came from.
        let bytes = client_request(MessageType::Request, MAC, 7, pxe(7));
        let m = full();
        let reply = r
            .handle(&bytes, "10.9.0.77:68".parse().unwrap(), PXE_PORT, |_| {
                Lookup::Found(m.clone(), 0)
            })
            .unwrap();
        assert_eq!(reply.kind, MessageType::Ack);
        assert_eq!(reply.to, "10.9.0.77:68".parse().unwrap());
        // On 67, a REQUEST for the leasing server's offer is not ours.
        let bytes = client_request(
            MessageType::Request,
            MAC,
            7,
            [
                pxe(7),
                vec![DhcpOption::ServerIdentifier(Ipv4Addr::new(10, 9, 0, 2))],
            ]
            .concat(),
        );
        assert_eq!(
            r.handle(&bytes, from(), 67, |_| Lookup::Found(m.clone(), 0))
                .unwrap_err(),
            Ignored::OtherServer
        );
    }

    #[test]
    fn long_script_urls_go_in_option_67_only() {
        let mut r = responder(DhcpMode::Reservation);
        r.config.ipxe_script_url = format!("http://10.9.0.1/{}", "a".repeat(300));
        let (_, msg) = ask(
            &r,
            &full(),
            MessageType::Discover,
            vec![DhcpOption::UserClass(b"iPXE".to_vec())],
        )
        .unwrap();
        assert_eq!(msg.fname(), None);
        assert_eq!(file(&msg).map(|f| f.len()), Some(316));
    }

    #[test]
    fn malformed_packets_are_refused() {
        let r = responder(DhcpMode::Reservation);
        let good = client_request(MessageType::Discover, MAC, 1, []);
        for bad in [
            vec![],
            vec![1; 10],
            good[..239].to_vec(),
            {
                let mut b = good.clone();
                b[236] = 0;
                b
            },
            {
                // hlen 200: dhcproto would slice chaddr past its 16 bytes.
                let mut b = good.clone();
                b[2] = 200;
                b
            },
        ] {
            assert!(
                r.handle(&bad, from(), 67, |_| Lookup::Unknown).is_err(),
                "{bad:?}"
            );
        }
        let mut b = good.clone();
        b[2] = 200;
        assert_eq!(parse(&b).unwrap_err(), Ignored::NotARequest);
        // Options without the message type.
        let mut b = good[..240].to_vec();
        b.push(255);
        assert_eq!(parse(&b).unwrap_err(), Ignored::NoMessageType);
    }

    #[test]
    fn options_that_crash_dhcproto_never_reach_it() {
        let good = client_request(MessageType::Discover, MAC, 1, []);
        let (head, _) = good.split_at(240);
        for opts in [
            // dhcproto asserts these lengths (checked against dhcproto 0.14 directly):
            // bulk lease query base time (152) and start time of state (153) of 2 bytes,
            vec![53, 1, 1, 152, 2, 0, 0, 255],
            vec![53, 1, 1, 153, 2, 0, 0, 255],
            // client network interface (94, which PXE clients send) of 2 bytes,
            vec![53, 1, 1, 94, 2, 1, 2, 255],
            // rapid commit (80) with data
            vec![53, 1, 1, 80, 1, 0, 255],
            // two architectures, repeated message types, a cut-off option
            vec![53, 1, 1, 93, 4, 0, 7, 0, 0, 53, 1, 3, 255],
        ] {
            let mut b = head.to_vec();
            b.extend_from_slice(&opts);
            let r = parse(&b);
            assert!(
                matches!(&r, Ok(req) if req.kind == MessageType::Discover),
                "{opts:?}"
            );
        }
        let mut cut = head.to_vec();
        cut.extend_from_slice(&[53, 1, 1, 60, 9, b'P']);
        assert_eq!(parse(&cut).unwrap_err(), Ignored::Malformed);
        // Architecture from the first type of a list.
        let mut b = head.to_vec();
        b.extend_from_slice(&[53, 1, 1, 60, 9]);
        b.extend_from_slice(b"PXEClient");
        b.extend_from_slice(&[93, 4, 0, 7, 0, 0, 255]);
        assert_eq!(client_kind(&parse(&b).unwrap().msg), ClientKind::Pxe(7));
    }

    #[test]
    fn mac_strings_are_lower_case() {
        assert_eq!(
            mac_string(&[0xAA, 0xbb, 0x0c, 0, 1, 0xff]),
            "aa:bb:0c:00:01:ff"
        );
    }

    fn any_lookup(m: &Arc<Machine>, pick: u8) -> Lookup {
        match pick % 3 {
            0 => Lookup::Found(m.clone(), 0),
            1 => Lookup::Unknown,
            _ => Lookup::Conflict(vec!["a/b".into(), "c/d".into()]),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..1500),
            port in proptest::sample::select(vec![67u16, 4011]),
            pick in proptest::num::u8::ANY,
        ) {
            let m = full();
            for mode in [DhcpMode::Reservation, DhcpMode::Proxy] {
                let _ = responder(mode).handle(&bytes, from(), port, |_| any_lookup(&m, pick));
            }
        }

        #[test]
        fn mutated_valid_packets_never_panic(
            kind in proptest::sample::select(vec![
                MessageType::Discover, MessageType::Request, MessageType::Inform,
                MessageType::Release, MessageType::Decline,
            ]),
            arch in 0u16..20,
            ipxe in proptest::bool::ANY,
            edits in proptest::collection::vec((0usize..400, proptest::num::u8::ANY), 0..12),
            cut in 0usize..420,
            pick in proptest::num::u8::ANY,
            extra in proptest::collection::vec(
                (proptest::num::u8::ANY, proptest::collection::vec(proptest::num::u8::ANY, 0..9)),
                0..6,
            ),
        ) {
            let mut opts = pxe(arch);
            if ipxe {
                opts.push(DhcpOption::UserClass(b"iPXE".to_vec()));
            }
            opts.push(DhcpOption::RequestedIpAddress(Ipv4Addr::new(10, 9, 0, 10)));
            let mut bytes = client_request(kind, MAC, 9, opts);
            // Random options (any code, a length that fits or not) before the End option.
            let end = bytes.len().saturating_sub(1);
            let mut added = Vec::new();
            for (code, value) in extra {
                added.push(code);
                added.push(value.len() as u8 ^ (code & 3));
                added.extend_from_slice(&value);
            }
            bytes.splice(end..end, added);
            for (at, v) in edits {
                if let Some(b) = bytes.get_mut(at) {
                    *b = v;
                }
            }
            if cut < 400 {
                bytes.truncate(cut.max(1));
            }
            let m = full();
            for mode in [DhcpMode::Reservation, DhcpMode::Proxy] {
                for port in [67, 4011] {
                    let _ = responder(mode).handle(&bytes, from(), port, |_| any_lookup(&m, pick));
                }
            }
        }
    }
}
