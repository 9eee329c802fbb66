//! `tinkerbell.org/v1alpha1`: Tinkerbell's current Hardware, Template and Workflow, as operators
//! use them today (the Go types of tinkerbell/tink `api/v1alpha1`).
//!
//! Every struct keeps the fields it does not know in a flattened `extra` map, and the CRD
//! schema marks those objects `x-kubernetes-preserve-unknown-fields`, so fields written by newer
//! Tinkerbell releases survive a read-modify-write and a conversion. Fields follow Go's
//! `omitempty` conventions: plain strings, numbers and bools are omitted when empty or zero, Go
//! pointers are `Option`s.

mod hardware;
mod template;
mod workflow;

pub use hardware::{
    Dhcp, Disk, Hardware, HardwareMetadata, HardwareSpec, HardwareStatus, Interface, Ip, Ipxe,
    MetadataFacility, MetadataInstance, MetadataManufacturer, Netboot, Osie,
    TypedLocalObjectReference,
};
pub use template::{
    Template, TemplateAction, TemplateDoc, TemplateDocError, TemplateSpec, TemplateStatus,
    TemplateTask,
};
pub use workflow::{
    AllowNetbootStatus, BOOT_MODES, BmcAction, BootDeviceConfig, BootOptionsStatus, BootOpts,
    CustombootConfig, JobStatus, Workflow, WorkflowAction, WorkflowCondition, WorkflowSpec,
    WorkflowState, WorkflowStatus, WorkflowTask,
};

use std::collections::BTreeMap;

use schemars::{Schema, SchemaGenerator, json_schema};

/// The API version string of this module's kinds.
pub const API_VERSION: &str = "tinkerbell.org/v1alpha1";
/// The version name.
pub const VERSION: &str = "v1alpha1";

/// Fields a struct does not know, kept verbatim.
pub type Extra = BTreeMap<String, serde_json::Value>;

/// Schema of a free-form JSON value kept as is.
pub(crate) fn any_value_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Schema of a free-form JSON object kept as is.
pub(crate) fn any_object_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Schema of a list of free-form JSON objects kept as is.
pub(crate) fn any_object_list_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
    })
}
