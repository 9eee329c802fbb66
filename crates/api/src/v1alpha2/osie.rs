//! `OSIE`: an Operating System Installation Environment that Hardware netboots.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::serde_util::empty_as_none;

/// Where to fetch an OSIE's kernel and initrd. Shared by every Hardware that references it.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "tinkerbell.org",
    version = "v1alpha2",
    kind = "OSIE",
    root = "Osie",
    plural = "osies",
    singular = "osie",
    namespaced,
    shortname = "osie",
    category = "tinkerbell",
    derive = "PartialEq",
    derive = "Default",
    doc = "OSIE describes an Operating System Installation Environment. It is used by Tinkerbell to provision machines and should launch the Tink agent.",
    printcolumn(name = "Kernel", type_ = "string", json_path = ".spec.kernelUrl"),
    printcolumn(
        name = "Initrd",
        type_ = "string",
        json_path = ".spec.initrdUrl",
        priority = "1"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct OsieSpec {
    /// KernelURL is a URL to a kernel image.
    #[serde(
        default,
        rename = "kernelUrl",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub kernel_url: Option<String>,

    /// InitrdURL is a URL to an initrd image.
    #[serde(
        default,
        rename = "initrdUrl",
        skip_serializing_if = "Option::is_none",
        deserialize_with = "empty_as_none"
    )]
    pub initrd_url: Option<String>,
}
