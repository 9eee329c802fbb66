//! The actions a Job's tasks perform: power, one-time boot device, virtual media.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;

/// A power operation (Rufio's `PowerAction`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PowerAction {
    /// Power on.
    On,
    /// Hard power off.
    Off,
    /// Soft (graceful, ACPI) power off.
    Soft,
    /// Power cycle: off, then on.
    Cycle,
    /// Hard reset.
    Reset,
    /// Read the power state only.
    Status,
}

impl PowerAction {
    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::Off => "off",
            Self::Soft => "soft",
            Self::Cycle => "cycle",
            Self::Reset => "reset",
            Self::Status => "status",
        }
    }
}

impl std::fmt::Display for PowerAction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A boot device (Rufio's `BootDevice`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BootDevice {
    /// Network boot.
    Pxe,
    /// The local disk.
    Disk,
    /// The firmware setup.
    Bios,
    /// A CD or DVD (virtual media included).
    Cdrom,
    /// Safe mode.
    Safe,
}

impl BootDevice {
    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pxe => "pxe",
            Self::Disk => "disk",
            Self::Bios => "bios",
            Self::Cdrom => "cdrom",
            Self::Safe => "safe",
        }
    }
}

impl std::fmt::Display for BootDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A one-time boot device for the next boot.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OneTimeBootDeviceAction {
    /// The boot devices in order; only the first is used (as Rufio does).
    #[serde(rename = "device")]
    #[schemars(length(min = 1))]
    pub devices: Vec<BootDevice>,
    /// Boot the device in UEFI mode (legacy BIOS mode when false).
    #[serde(default, skip_serializing_if = "crate::serde_util::is_false")]
    pub efi_boot: bool,
}

/// The kind of virtual media.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum VirtualMediaKind {
    /// A virtual CD-ROM.
    #[serde(rename = "CD")]
    Cd,
}

/// Insert an image into a virtual media device, or eject it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct VirtualMediaAction {
    /// The URL of the image to insert; empty or absent to eject the media.
    #[serde(rename = "mediaURL", default, skip_serializing_if = "String::is_empty")]
    pub media_url: String,
    /// The kind of media device.
    pub kind: VirtualMediaKind,
}

/// One baseboard management action: exactly one of the three.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": rules::ONE_ACTION, "message": rules::ONE_ACTION_MSG}
]))]
pub struct Action {
    /// A power operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_action: Option<PowerAction>,
    /// A one-time boot device for the next boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_time_boot_device_action: Option<OneTimeBootDeviceAction>,
    /// A virtual media insert or eject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_media_action: Option<VirtualMediaAction>,
}

/// The one action an [`Action`] names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionKind<'a> {
    /// A power operation.
    Power(PowerAction),
    /// A one-time boot device.
    OneTimeBootDevice(&'a OneTimeBootDeviceAction),
    /// A virtual media insert or eject.
    VirtualMedia(&'a VirtualMediaAction),
}

impl Action {
    /// A power action.
    pub fn power(action: PowerAction) -> Self {
        Self {
            power_action: Some(action),
            ..Self::default()
        }
    }

    /// The one action this names; `None` when it names none or more than one (the CRD's rule
    /// refuses both at admission).
    pub fn kind(&self) -> Option<ActionKind<'_>> {
        match (
            self.power_action,
            self.one_time_boot_device_action.as_ref(),
            self.virtual_media_action.as_ref(),
        ) {
            (Some(p), None, None) => Some(ActionKind::Power(p)),
            (None, Some(b), None) => Some(ActionKind::OneTimeBootDevice(b)),
            (None, None, Some(v)) => Some(ActionKind::VirtualMedia(v)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_is_exactly_one_kind() {
        assert_eq!(
            Action::power(PowerAction::Cycle).kind(),
            Some(ActionKind::Power(PowerAction::Cycle))
        );
        assert_eq!(Action::default().kind(), None);
        let both = Action {
            power_action: Some(PowerAction::On),
            virtual_media_action: Some(VirtualMediaAction {
                media_url: String::new(),
                kind: VirtualMediaKind::Cd,
            }),
            ..Action::default()
        };
        assert_eq!(both.kind(), None);
    }

    #[test]
    fn json_spellings_are_rufios() {
        let a: Action = serde_json::from_str(
            r#"{"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": true}}"#,
        )
        .expect("parse");
        assert_eq!(
            a.kind(),
            Some(ActionKind::OneTimeBootDevice(&OneTimeBootDeviceAction {
                devices: vec![BootDevice::Pxe],
                efi_boot: true
            }))
        );
        let v: Action = serde_json::from_str(
            r#"{"virtualMediaAction": {"mediaURL": "http://x/a.iso", "kind": "CD"}}"#,
        )
        .expect("parse");
        assert_eq!(
            serde_json::to_value(&v).expect("json"),
            serde_json::json!({"virtualMediaAction": {"mediaURL": "http://x/a.iso", "kind": "CD"}})
        );
        for p in ["on", "off", "soft", "cycle", "reset", "status"] {
            let a: Action =
                serde_json::from_value(serde_json::json!({ "powerAction": p })).expect(p);
            assert_eq!(a.power_action.map(PowerAction::as_str), Some(p));
        }
        assert!(serde_json::from_str::<Action>(r#"{"powerAction": "ON"}"#).is_err());
    }
}
