//! What netboot knows about one machine: its interfaces as DHCP reads them, and what the ISO
//! route needs for its kernel parameters, computed once per Hardware change
//! ([`Interface::all_of`], [`Machine::from_hardware`]), never per packet or request.

use std::sync::Arc;

use tink_api::v1alpha2::Hardware;
use tink_hardware_index::InterfaceEntry;

pub use tink_hardware_index::Interface;

/// Everything netboot answers about one Hardware.
#[derive(Clone, Debug)]
pub struct Machine {
    /// `namespace/name`.
    pub key: String,
    /// Its interfaces, in `spec.networkInterfaces` key order.
    pub interfaces: Vec<Interface>,
    /// Hegel's view of the Hardware (migrated facility code, agent secret annotation), which
    /// [`hegel::ipxe::kernel_params`] reads: the ISO route gives the parameters the iPXE script
    /// gives by calling the same function. Built from the Hardware without its user data and
    /// addresses, so it holds no meta-data tree (netboot serves none).
    pub boot: Arc<hegel::machine::Machine>,
    /// `spec.osie.kernelParams`, appended last (with or without an `osieRef`: the ISO carries
    /// its own kernel).
    pub kernel_params: Vec<String>,
}

impl Machine {
    /// The machine of `hw`.
    pub fn from_hardware(hw: &Hardware) -> Self {
        let mut slim = hw.clone();
        slim.spec.instance = None;
        for i in slim.spec.network_interfaces.values_mut() {
            if let Some(d) = i.dhcp.as_mut() {
                d.ip = None;
            }
        }
        Self {
            key: tink_hardware_index::key(
                hw.metadata.namespace.as_deref().unwrap_or_default(),
                hw.metadata.name.as_deref().unwrap_or_default(),
            ),
            interfaces: Interface::all_of(hw),
            boot: Arc::new(hegel::machine::Machine::from_hardware(&slim)),
            kernel_params: hw
                .spec
                .osie
                .as_ref()
                .map(|o| o.kernel_params.clone())
                .unwrap_or_default(),
        }
    }

    /// Interface `index` (as returned by a lookup).
    pub fn interface(&self, index: usize) -> Option<&Interface> {
        self.interfaces.get(index)
    }
}

/// Netboot's entry in the shared Hardware index: found by the MACs (and IPv4 `dhcp.ip`s) of
/// its interfaces, the slot being the interface.
impl InterfaceEntry for Machine {
    fn of_hardware(hw: &Hardware) -> Self {
        Machine::from_hardware(hw)
    }

    fn parts(&self) -> (&str, &[Interface]) {
        (&self.key, &self.interfaces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tink_hardware_index::Entry;

    #[test]
    fn interfaces_and_claims_follow_the_hardware() {
        let hw: Hardware = serde_json::from_value(json!({
            "apiVersion": "tinkerbell.org/v1alpha2", "kind": "Hardware",
            "metadata": {"name": "m1", "namespace": "ns"},
            "spec": {"networkInterfaces": {
                "02:00:00:00:00:01": {"dhcp": {"ip": "10.0.0.1"}},
                "02:00:00:00:00:02": {"disableDhcp": true}
            }},
        }))
        .expect("hardware");
        let m = Machine::from_hardware(&hw);
        assert_eq!(m.key, "ns/m1");
        assert!(m.interface(1).is_some_and(|i| i.disable_dhcp));
        assert!(m.interface(2).is_none());
        let c = m.claims();
        assert_eq!(c.macs.len(), 2);
        assert_eq!(c.ips.len(), 1);
    }
}
