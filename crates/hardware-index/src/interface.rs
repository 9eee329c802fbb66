//! The network view of a Hardware's interfaces, as the boot services (DHCP in netboot, the
//! meta-data and iPXE script in Hegel) read them: parsed once per Hardware change, never per
//! request.

use std::net::Ipv4Addr;

use tink_api::v1alpha2::Hardware;

/// One network interface of a machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Lower-case MAC address (the `networkInterfaces` key).
    pub mac: String,
    /// `dhcp.ip`, when it parses as an IPv4 address.
    pub ip: Option<Ipv4Addr>,
    /// `dhcp.hostname`.
    pub hostname: Option<String>,
    /// `dhcp.vlanId`.
    pub vlan_id: Option<String>,
    /// `dhcp.netmask`, when it parses as an IPv4 address (the DHCP subnet mask, option 1).
    pub netmask: Option<Ipv4Addr>,
    /// `dhcp.gateway`, when it parses as an IPv4 address (the DHCP router, option 3).
    pub gateway: Option<Ipv4Addr>,
    /// The IPv4 addresses among `dhcp.nameservers`, in order (DHCP option 6 carries addresses
    /// only; host names are left out).
    pub nameservers: Vec<Ipv4Addr>,
    /// The IPv4 addresses among `dhcp.timeservers`, in order (DHCP option 42).
    pub timeservers: Vec<Ipv4Addr>,
    /// `dhcp.leaseTime` in seconds, when `dhcp` is set and the value is positive.
    pub lease_time: Option<u32>,
    /// `disableDhcp`.
    pub disable_dhcp: bool,
    /// `disableNetboot`.
    pub disable_netboot: bool,
}

impl Interface {
    /// Whether this interface may netboot (`disableDhcp` implies `disableNetboot`).
    pub fn netboot_allowed(&self) -> bool {
        !self.disable_dhcp && !self.disable_netboot
    }

    /// The interfaces of `hw`, in `spec.networkInterfaces` key order (the slots of
    /// [`crate::Claims::of_interfaces`]).
    pub fn all_of(hw: &Hardware) -> Vec<Interface> {
        hw.spec
            .network_interfaces
            .iter()
            .map(|(mac, i)| {
                let dhcp = i.dhcp.as_ref();
                Interface {
                    mac: mac.to_ascii_lowercase(),
                    ip: dhcp
                        .and_then(|d| d.ip.as_deref())
                        .and_then(|ip| ip.trim().parse().ok()),
                    hostname: dhcp.and_then(|d| d.hostname.as_deref()).and_then(non_empty),
                    vlan_id: dhcp.and_then(|d| d.vlan_id.as_deref()).and_then(non_empty),
                    netmask: dhcp
                        .and_then(|d| d.netmask.as_deref())
                        .and_then(|m| m.trim().parse().ok()),
                    gateway: dhcp
                        .and_then(|d| d.gateway.as_deref())
                        .and_then(|g| g.trim().parse().ok()),
                    nameservers: dhcp.map(|d| ipv4s(&d.nameservers)).unwrap_or_default(),
                    timeservers: dhcp.map(|d| ipv4s(&d.timeservers)).unwrap_or_default(),
                    lease_time: dhcp
                        .and_then(|d| u32::try_from(d.lease_time).ok())
                        .filter(|t| *t > 0),
                    disable_dhcp: i.disable_dhcp,
                    disable_netboot: i.disable_netboot,
                }
            })
            .collect()
    }
}

/// The trimmed text, unless it is empty.
pub fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

/// The entries of `list` that are IPv4 addresses (host names are skipped).
fn ipv4s(list: &[String]) -> Vec<Ipv4Addr> {
    list.iter().filter_map(|s| s.trim().parse().ok()).collect()
}
