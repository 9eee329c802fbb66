//! BMC providers behind one trait, [`Bmc`]: power state get and set, a one-time boot device,
//! virtual media. Three implementations:
//!
//! - [`redfish::Redfish`]: `ComputerSystem.Reset`, the `Boot` override PATCH followed by a
//!   re-read (some BMCs answer 200 and drop it: reported as
//!   [`ErrorKind::BootOverrideDropped`]), `VirtualMedia.InsertMedia`/`EjectMedia`; basic auth or
//!   a session; TLS verified against the Machine's CA, the system roots, or not at all when
//!   the Machine says `insecureTLS`. A host without a scheme means `https://` (as bmclib).
//! - [`ipmi::Ipmitool`]: `ipmitool -I lanplus` as bmclib runs it (password in
//!   `IPMITOOL_PASSWORD`, never on the command line; cipher suite 3, then 17).
//! - [`rpc::Rpc`]: bmclib's RPC provider format: a JSON POST per operation, HMAC-signed
//!   (`X-Rufio-Signature-256: sha256=<hex>`, body plus the timestamp header's value).
//!
//! Every call has a timeout ([`Policy::timeout`]), runs under a per-BMC and an overall
//! concurrency bound ([`Limits`]), and is retried with back-off when retrying is safe: reads
//! and idempotent writes after any transient failure, non-idempotent power actions (cycle,
//! reset) only when the request provably never left (the connection failed). A provider
//! never repeats a power action without reading the state first where the protocol allows.
//!
//! Every connection goes only to addresses inside [`Policy::allowed_networks`] (see [`net`]):
//! a Machine's host is chosen by whoever may edit the Machine, and this is what keeps it from
//! pointing the controller's requests at any address the controller can reach.
//!
//! [`credentials`] reads credentials from Kubernetes Secrets and refuses a Secret outside the
//! Machine's namespace or of another type than `kubernetes.io/basic-auth`.
//!
//! Credentials live in [`Secret`], whose `Debug` and `Display` print `***`; errors name the
//! provider, host and operation, never a credential.
#![forbid(unsafe_code)]

mod connect;
pub mod credentials;
mod error;
mod golayout;
mod http;
pub mod ipmi;
mod limit;
pub mod net;
pub mod redfish;
pub mod rpc;
mod secret;
mod target;

pub use connect::{Resolved, providers};
pub use error::{Error, ErrorKind};
pub use limit::{Limits, Policy};
pub use secret::{Credentials, Secret};
pub use target::{ProviderKind, RedfishHost, TlsConfig, provider_order};

use tink_api::bmc::{BootDevice, PowerAction, PowerState};

/// A power change: [`PowerAction`] without `status`, with what a provider needs to know
/// about it ([`PowerChange::target_state`], [`PowerChange::is_idempotent`]). The one mapping
/// between the two is [`PowerChange::action`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PowerChange {
    /// Power on (nothing when already on).
    On,
    /// Hard power off (nothing when already off).
    Off,
    /// Graceful (ACPI) power off.
    Soft,
    /// Off, then on; an off machine is just powered on.
    Cycle,
    /// Hard reset.
    Reset,
}

impl PowerChange {
    /// Every change.
    pub const ALL: [Self; 5] = [Self::On, Self::Off, Self::Soft, Self::Cycle, Self::Reset];

    /// The power action that asks for this change.
    pub fn action(self) -> PowerAction {
        match self {
            Self::On => PowerAction::On,
            Self::Off => PowerAction::Off,
            Self::Soft => PowerAction::Soft,
            Self::Cycle => PowerAction::Cycle,
            Self::Reset => PowerAction::Reset,
        }
    }

    /// The change a power action asks for; `None` for `status`.
    pub fn from_action(a: PowerAction) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.action() == a)
    }

    /// The power state the machine reaches once the change is applied.
    pub fn target_state(self) -> PowerState {
        match self {
            Self::Off | Self::Soft => PowerState::Off,
            Self::On | Self::Cycle | Self::Reset => PowerState::On,
        }
    }

    /// Whether sending it twice does the same as sending it once (on and off are; a second
    /// cycle or reset is a second reboot).
    pub fn is_idempotent(self) -> bool {
        matches!(self, Self::On | Self::Off | Self::Soft)
    }

    /// The lower-case name (`on`, `off`, ...), as in the API.
    pub fn as_str(self) -> &'static str {
        self.action().as_str()
    }
}

impl From<PowerChange> for PowerAction {
    fn from(c: PowerChange) -> Self {
        c.action()
    }
}

impl TryFrom<PowerAction> for PowerChange {
    type Error = PowerAction;

    /// The change `a` asks for; `status` (which changes nothing) is the error.
    fn try_from(a: PowerAction) -> Result<Self, PowerAction> {
        Self::from_action(a).ok_or(a)
    }
}

impl std::fmt::Display for PowerChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One BMC, reached through one provider.
#[async_trait::async_trait]
pub trait Bmc: Send + Sync {
    /// The provider's name (`redfish`, `ipmitool`, `rpc`).
    fn provider(&self) -> &'static str;

    /// The machine's power state.
    async fn power_state(&self) -> Result<PowerState, Error>;

    /// Asks for a power change. The BMC may apply it later: callers poll
    /// [`Bmc::power_state`] for [`PowerChange::target_state`].
    async fn set_power(&self, change: PowerChange) -> Result<(), Error>;

    /// Sets the device of the next boot only, in UEFI mode when `efi_boot`.
    async fn set_boot_once(&self, device: BootDevice, efi_boot: bool) -> Result<(), Error>;

    /// Inserts the image at `url` into the virtual CD (ejecting what is there first).
    async fn insert_media(&self, url: &str) -> Result<(), Error>;

    /// Ejects the virtual CD's media (nothing when it is empty).
    async fn eject_media(&self) -> Result<(), Error>;

    /// Ends what the provider holds open on the BMC (a Redfish session); a later call opens
    /// it again. Providers that hold nothing do nothing. Dropping a provider inside a Tokio
    /// runtime does the same in the background; awaiting this makes sure it is done.
    async fn close(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_changes_are_the_actions_but_status() {
        for c in PowerChange::ALL {
            assert_eq!(PowerChange::from_action(c.action()), Some(c));
            assert_eq!(PowerChange::try_from(PowerAction::from(c)), Ok(c));
            assert_eq!(c.to_string(), c.action().as_str());
        }
        assert_eq!(PowerChange::from_action(PowerAction::Status), None);
        assert_eq!(
            PowerChange::try_from(PowerAction::Status),
            Err(PowerAction::Status)
        );
    }
}
