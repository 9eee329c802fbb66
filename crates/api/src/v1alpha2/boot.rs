//! `Workflow.spec.bootOptions` and `Workflow.status.bootOptions`: how the controller gets the
//! Hardware to boot into the OSIE through its BMC before the Workflow is dispatched, and what
//! it does after the Workflow succeeded. Field names, JSON spellings and enum values are
//! Tinkerbell's (`api/v1alpha1/tinkerbell/workflow.go`), so manifests move between the two
//! unchanged; the deprecated `iso` spelling of `isoboot` and the older `oneTimeNetboot` flag
//! exist only in v1alpha1 (conversion maps them here).
//!
//! What each mode asks of the controller (it creates `job.bmc.tinkerbell.org` Jobs against the
//! Hardware's `spec.bmcRef` Machine and records them in `status.bootOptions.jobs`):
//! - `netboot`: before dispatch, power off, set a one-time PXE boot, power on;
//! - `isoboot`: before dispatch, power off, eject any virtual media, insert `isoURL` as a
//!   virtual CD, set a one-time CD-ROM boot, power on; after success, eject it;
//! - `customboot`: `custombootConfig.preparingActions` before dispatch and `postActions` after
//!   success, as given;
//! - absent: no Job; the machine is expected to boot into the OSIE by itself.
//!
//! `toggleAllowNetboot` is independent of the mode: netboot is allowed on the Hardware
//! (`disableNetboot: false` on its interfaces) before the Workflow runs and disallowed after it
//! succeeded, so the next reboot reaches the installed disk.
//!
//! The rules the API server checks are the CEL rules on [`BootOptions`] (see
//! [`super::rules`]); [`BootOptions::problems`] states the same rules and a few more for the
//! admission webhook, which also checks v1alpha1 objects (after conversion) that the v1alpha2
//! CEL rules never see.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;
use crate::bmc;
use crate::serde_util::{empty_as_none, is_false};

/// The JSON schema pattern of `isoURL`: an `http` or `https` URL with a host (BMCs fetch
/// virtual media over HTTP; `file:` or a bare path would only fail later, on the BMC).
pub const ISO_URL_PATTERN: &str = r"^https?://[^/?#\s]+(/\S*)?$";

/// How the Hardware is booted into the OSIE for a Workflow.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BootMode {
    /// One-time PXE boot through the BMC (power off, boot device PXE, power on).
    Netboot,
    /// Boot `isoURL` as virtual media through the BMC; ejected after success.
    Isoboot,
    /// Run `custombootConfig`'s BMC actions before dispatch and after success.
    Customboot,
}

impl BootMode {
    /// Every mode, in declaration order.
    pub const ALL: [Self; 3] = [Self::Netboot, Self::Isoboot, Self::Customboot];

    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Netboot => "netboot",
            Self::Isoboot => "isoboot",
            Self::Customboot => "customboot",
        }
    }
}

impl fmt::Display for BootMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The BMC actions of `bootMode: customboot`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustombootConfig {
    /// PreparingActions run, in order, as one BMC Job before the Workflow is dispatched. They
    /// should leave the machine booting into the OSIE (for example: power off, one-time boot
    /// device `pxe`, power on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preparing_actions: Vec<bmc::Action>,
    /// PostActions run, in order, as one BMC Job after every Workflow action succeeded (never
    /// after a failure). For example: eject virtual media, one-time boot device `disk`, reset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_actions: Vec<bmc::Action>,
}

impl CustombootConfig {
    /// Neither list has an action.
    pub fn is_empty(&self) -> bool {
        self.preparing_actions.is_empty() && self.post_actions.is_empty()
    }
}

/// Options that control how the Hardware boots for this Workflow (Tinkerbell's
/// `bootOptions`). Every mode needs `spec.hardwareRef`, and `bootMode` needs that Hardware to
/// have a `spec.bmcRef`. Immutable once the controller acted on them (the Workflow left
/// `Pending` or `status.bootOptions` records a step).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": rules::ISO_URL_REQUIRED, "message": rules::ISO_URL_REQUIRED_MSG},
    {"rule": rules::ISO_URL_ONLY_ISOBOOT, "message": rules::ISO_URL_ONLY_ISOBOOT_MSG},
    {"rule": rules::CUSTOMBOOT_CONFIG_REQUIRED, "message": rules::CUSTOMBOOT_CONFIG_REQUIRED_MSG},
    {"rule": rules::CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT, "message": rules::CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT_MSG}
]))]
pub struct BootOptions {
    /// ToggleAllowNetboot: the controller allows netboot on the Hardware (clears
    /// `disableNetboot` on its interfaces) before the Workflow runs and disallows it after the
    /// Workflow succeeded, so the machine's next boot reaches its installed disk.
    #[serde(default, skip_serializing_if = "is_false")]
    pub toggle_allow_netboot: bool,

    /// ISOURL is the `http(s)` URL of the ISO that `bootMode: isoboot` inserts as virtual media
    /// and boots once. Required with `isoboot`, refused with any other mode.
    #[serde(
        default,
        rename = "isoURL",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    #[schemars(regex(pattern = ISO_URL_PATTERN))]
    pub iso_url: Option<String>,

    /// BootMode is how the controller boots the Hardware through its BMC before dispatch:
    /// `netboot`, `isoboot` or `customboot`. Absent: no BMC Job is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mode: Option<BootMode>,

    /// CustombootConfig holds the BMC actions of `bootMode: customboot` (required with it,
    /// refused with any other mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customboot_config: Option<CustombootConfig>,
}

/// Where a refused boot option is, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootOptionsProblem {
    /// The field path below `spec.bootOptions` (`isoURL`,
    /// `custombootConfig.preparingActions[1]`); empty for the object itself.
    pub field: String,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl BootOptions {
    /// Nothing is asked of the controller.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// The BMC is needed (a mode is set).
    pub fn needs_bmc(&self) -> bool {
        self.boot_mode.is_some()
    }

    /// The rules a `bootOptions` object must satisfy, as problems naming the field: the CEL
    /// rules of the schema, plus what CEL does not say (a `customboot` with no action at all,
    /// an action that names no or several operations, an `isoURL` that is not a URL).
    pub fn problems(&self) -> Vec<BootOptionsProblem> {
        let mut out = Vec::new();
        let mut add = |field: &str, message: String| {
            out.push(BootOptionsProblem {
                field: field.to_string(),
                message,
            })
        };
        let mode = self.boot_mode;
        match (&self.iso_url, mode) {
            (None, Some(BootMode::Isoboot)) => {
                add("isoURL", rules::ISO_URL_REQUIRED_MSG.to_string());
            }
            (Some(_), m) if m != Some(BootMode::Isoboot) => {
                add("isoURL", rules::ISO_URL_ONLY_ISOBOOT_MSG.to_string());
            }
            (Some(url), _) => {
                if let Err(why) = check_iso_url(url) {
                    add("isoURL", why);
                }
            }
            (None, _) => {}
        }
        match (&self.customboot_config, mode) {
            (None, Some(BootMode::Customboot)) => {
                add(
                    "custombootConfig",
                    rules::CUSTOMBOOT_CONFIG_REQUIRED_MSG.to_string(),
                );
            }
            (Some(_), m) if m != Some(BootMode::Customboot) => {
                add(
                    "custombootConfig",
                    rules::CUSTOMBOOT_CONFIG_ONLY_CUSTOMBOOT_MSG.to_string(),
                );
            }
            (Some(c), _) => {
                if c.is_empty() {
                    add(
                        "custombootConfig",
                        "bootMode customboot needs at least one action in custombootConfig.preparingActions or custombootConfig.postActions".to_string(),
                    );
                }
                for (list, actions) in [
                    ("preparingActions", &c.preparing_actions),
                    ("postActions", &c.post_actions),
                ] {
                    for (i, a) in actions.iter().enumerate() {
                        if a.kind().is_none() {
                            add(
                                &format!("custombootConfig.{list}[{i}]"),
                                format!(
                                    "{}; a persistent bootDevice and newer Tinkerbell BMC actions are not supported: use oneTimeBootDeviceAction",
                                    bmc::rules::ONE_ACTION_MSG
                                ),
                            );
                        }
                    }
                }
            }
            (None, _) => {}
        }
        out
    }
}

/// Checks an `isoURL` beyond the schema pattern: it must parse as an absolute `http(s)` URL
/// with a host.
fn check_iso_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url)
        .map_err(|e| format!("isoURL {url:?} is not a valid URL ({e}); give an http(s) URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "isoURL {url:?} uses scheme {:?}; BMCs fetch virtual media over http or https",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("isoURL {url:?} has no host"));
    }
    Ok(())
}

/// What the controller did with the Hardware's netboot setting for this Workflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowNetbootStatus {
    /// ToggledTrue: netboot was allowed on the Hardware before the Workflow ran.
    #[serde(default, skip_serializing_if = "is_false")]
    pub toggled_true: bool,
    /// ToggledFalse: netboot was disallowed on the Hardware after the Workflow succeeded.
    #[serde(default, skip_serializing_if = "is_false")]
    pub toggled_false: bool,
}

impl AllowNetbootStatus {
    /// Nothing toggled.
    pub fn is_empty(&self) -> bool {
        !self.toggled_true && !self.toggled_false
    }
}

/// One `job.bmc.tinkerbell.org` Job the controller created for this Workflow.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootJobStatus {
    /// UID of the Job created. Jobs of one Workflow step reuse the same name, so the UID tells
    /// this Workflow's Job from an older one of that name.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub uid: Option<String>,
    /// Complete: the Job reported its `Completed` condition (every BMC action succeeded).
    #[serde(default, skip_serializing_if = "is_false")]
    pub complete: bool,
    /// ExistingJobDeleted: a Job of the same name left from an earlier run was deleted before
    /// this one was created.
    #[serde(default, skip_serializing_if = "is_false")]
    pub existing_job_deleted: bool,
}

/// The boot steps the controller took for this Workflow. Written by the controller only.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootOptionsStatus {
    /// AllowNetboot: what was done with the Hardware's netboot setting
    /// (`spec.bootOptions.toggleAllowNetboot`).
    #[serde(default, skip_serializing_if = "AllowNetbootStatus::is_empty")]
    pub allow_netboot: AllowNetbootStatus,
    /// Jobs: the BMC Jobs created, by Job name (in the Workflow's namespace).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub jobs: BTreeMap<String, BootJobStatus>,
}

impl BootOptionsStatus {
    /// No step recorded.
    pub fn is_empty(&self) -> bool {
        self.allow_netboot.is_empty() && self.jobs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: serde_json::Value) -> BootOptions {
        serde_json::from_value(v).expect("parse")
    }

    fn fields(b: &BootOptions) -> Vec<String> {
        b.problems().into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn json_spellings_are_tinkerbells() {
        let b = parse(json!({"toggleAllowNetboot": true, "bootMode": "isoboot",
            "isoURL": "http://10.0.0.1:7171/iso/hook.iso"}));
        assert_eq!(b.boot_mode, Some(BootMode::Isoboot));
        assert!(b.toggle_allow_netboot);
        assert!(b.problems().is_empty(), "{:?}", b.problems());
        for m in BootMode::ALL {
            let v = serde_json::to_value(m).expect("json");
            assert_eq!(v, json!(m.as_str()));
        }
        assert!(serde_json::from_value::<BootOptions>(json!({"bootMode": "iso"})).is_err());
        let c = parse(json!({"bootMode": "customboot", "custombootConfig": {
            "preparingActions": [{"powerAction": "off"},
                {"oneTimeBootDeviceAction": {"device": ["pxe"], "efiBoot": true}},
                {"powerAction": "on"}],
            "postActions": [{"powerAction": "reset"}]}}));
        assert!(c.problems().is_empty(), "{:?}", c.problems());
        let status: BootOptionsStatus = serde_json::from_value(json!({
            "allowNetboot": {"toggledTrue": true},
            "jobs": {"netboot-wf": {"uid": "u-1", "complete": true, "existingJobDeleted": true}}}))
        .expect("status");
        assert!(status.allow_netboot.toggled_true && !status.allow_netboot.toggled_false);
        assert_eq!(status.jobs["netboot-wf"].uid.as_deref(), Some("u-1"));
        assert_eq!(
            serde_json::to_value(BootOptionsStatus::default()).expect("json"),
            json!({})
        );
    }

    #[test]
    fn each_mode_gets_what_it_needs_and_nothing_else() {
        assert_eq!(fields(&parse(json!({"bootMode": "isoboot"}))), ["isoURL"]);
        assert_eq!(
            fields(&parse(
                json!({"bootMode": "netboot", "isoURL": "http://a/b.iso"})
            )),
            ["isoURL"]
        );
        assert_eq!(
            fields(&parse(json!({"isoURL": "http://a/b.iso"}))),
            ["isoURL"]
        );
        assert_eq!(
            fields(&parse(json!({"bootMode": "customboot"}))),
            ["custombootConfig"]
        );
        assert_eq!(
            fields(&parse(
                json!({"bootMode": "customboot", "custombootConfig": {}})
            )),
            ["custombootConfig"]
        );
        assert_eq!(
            fields(&parse(
                json!({"bootMode": "netboot", "custombootConfig": {"postActions": [{"powerAction": "on"}]}})
            )),
            ["custombootConfig"]
        );
        assert_eq!(
            fields(&parse(
                json!({"bootMode": "customboot", "custombootConfig": {
                "preparingActions": [{"powerAction": "on"}, {}],
                "postActions": [{"powerAction": "on", "virtualMediaAction": {"kind": "CD"}}]}})
            )),
            [
                "custombootConfig.preparingActions[1]",
                "custombootConfig.postActions[0]"
            ]
        );
        assert!(parse(json!({"bootMode": "netboot"})).problems().is_empty());
        assert!(
            parse(json!({"toggleAllowNetboot": true}))
                .problems()
                .is_empty()
        );
    }

    #[test]
    fn iso_urls_are_http_urls_with_a_host() {
        for good in [
            "http://10.0.0.1/hook.iso",
            "https://boot.example.com:8443/iso/hook.iso?arch=x86_64",
        ] {
            let b = BootOptions {
                boot_mode: Some(BootMode::Isoboot),
                iso_url: Some(good.into()),
                ..BootOptions::default()
            };
            assert!(b.problems().is_empty(), "{good}: {:?}", b.problems());
            assert!(
                regex_lite_match(ISO_URL_PATTERN, good),
                "{good} fits the pattern"
            );
        }
        for bad in [
            "ftp://a/b.iso",
            "/srv/hook.iso",
            "http://",
            "file:///hook.iso",
        ] {
            let b = BootOptions {
                boot_mode: Some(BootMode::Isoboot),
                iso_url: Some(bad.into()),
                ..BootOptions::default()
            };
            let p = b.problems();
            assert_eq!(p.len(), 1, "{bad}: {p:?}");
            assert_eq!(p[0].field, "isoURL");
            assert!(p[0].message.contains("isoURL"), "{bad}: {p:?}");
            assert!(
                !regex_lite_match(ISO_URL_PATTERN, bad),
                "{bad} breaks the pattern"
            );
        }
    }

    fn regex_lite_match(pattern: &str, s: &str) -> bool {
        regex::Regex::new(pattern).expect("pattern").is_match(s)
    }
}
