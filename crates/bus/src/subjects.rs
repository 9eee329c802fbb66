//! Subject names.

use crate::token::{TokenError, agent_token, decode_token, workflow_token};

/// Prefix of the per-agent command subjects.
pub const DISPATCH_PREFIX: &str = "tink.dispatch";
/// All command subjects (the dispatch stream's subject).
pub const DISPATCH_ALL: &str = "tink.dispatch.*";
/// Prefix of the per-workflow event subjects.
pub const EVENTS_PREFIX: &str = "tink.events";
/// All event subjects (the events stream's subject; the controller's filter).
pub const EVENTS_ALL: &str = "tink.events.*";
/// Prefix of the core-NATS takeover notices (a newer stream for an agent opened somewhere).
pub const TAKEOVER_PREFIX: &str = "tink.presence.takeover";
/// All takeover notices (each server replica subscribes once).
pub const TAKEOVER_ALL: &str = "tink.presence.takeover.*";

/// Prefix of the per-agent inventory subjects.
pub const INVENTORY_PREFIX: &str = "tink.inventory";
/// All inventory subjects (the inventory stream's subject; the controller's filter).
pub const INVENTORY_ALL: &str = "tink.inventory.*";

/// Prefix of the core-NATS inventory requests (the controller asks an agent, through its
/// server, for a fresh inventory). Not under [`INVENTORY_PREFIX`]: requests are not stored.
pub const INVENTORY_REQUEST_PREFIX: &str = "tink.inventory-request";
/// All inventory requests (each server replica subscribes once).
pub const INVENTORY_REQUEST_ALL: &str = "tink.inventory-request.*";

/// `tink.inventory-request.<agent token>`.
pub fn inventory_request_subject(agent_id: &str) -> Result<String, TokenError> {
    Ok(format!(
        "{INVENTORY_REQUEST_PREFIX}.{}",
        agent_token(agent_id)?
    ))
}

/// `tink.inventory.<agent token>`.
pub fn inventory_subject(agent_id: &str) -> Result<String, TokenError> {
    Ok(format!("{INVENTORY_PREFIX}.{}", agent_token(agent_id)?))
}

/// The agent id of an inventory subject, `None` when the subject is not one.
pub fn agent_from_inventory_subject(subject: &str) -> Option<String> {
    id_after(subject, INVENTORY_PREFIX)
}

/// `tink.dispatch.<agent token>`.
pub fn dispatch_subject(agent_id: &str) -> Result<String, TokenError> {
    Ok(format!("{DISPATCH_PREFIX}.{}", agent_token(agent_id)?))
}

/// `tink.events.<workflow token>`.
pub fn events_subject(workflow_id: &str) -> Result<String, TokenError> {
    Ok(format!("{EVENTS_PREFIX}.{}", workflow_token(workflow_id)?))
}

/// `tink.presence.takeover.<agent token>`.
pub fn takeover_subject(agent_id: &str) -> Result<String, TokenError> {
    Ok(format!("{TAKEOVER_PREFIX}.{}", agent_token(agent_id)?))
}

/// The agent id of a dispatch subject, `None` when the subject is not one.
pub fn agent_from_dispatch_subject(subject: &str) -> Option<String> {
    id_after(subject, DISPATCH_PREFIX)
}

/// The workflow id of an events subject, `None` when the subject is not one.
pub fn workflow_from_events_subject(subject: &str) -> Option<String> {
    id_after(subject, EVENTS_PREFIX)
}

fn id_after(subject: &str, prefix: &str) -> Option<String> {
    let token = subject.strip_prefix(prefix)?.strip_prefix('.')?;
    if token.is_empty() {
        return None;
    }
    decode_token(token).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_round_trip() {
        let subject = dispatch_subject("aa:bb:cc:dd:ee:ff").unwrap();
        assert_eq!(subject, "tink.dispatch.aa_3abb_3acc_3add_3aee_3aff");
        assert_eq!(
            agent_from_dispatch_subject(&subject).as_deref(),
            Some("aa:bb:cc:dd:ee:ff")
        );
        let subject = events_subject("default/wf.1").unwrap();
        assert_eq!(subject, "tink.events.default_2fwf_2e1");
        assert_eq!(
            workflow_from_events_subject(&subject).as_deref(),
            Some("default/wf.1")
        );
        assert_eq!(agent_from_dispatch_subject("tink.events.x"), None);
        assert_eq!(agent_from_dispatch_subject("tink.dispatch."), None);
        assert_eq!(agent_from_dispatch_subject("tink.dispatch.a.b"), None);
        assert!(dispatch_subject("").is_err());
        let subject = inventory_subject("aa:bb:cc:dd:ee:ff").unwrap();
        assert_eq!(subject, "tink.inventory.aa_3abb_3acc_3add_3aee_3aff");
        // Requests are not under the inventory stream's subjects (one token after the prefix).
        let request = inventory_request_subject("aa:bb:cc:dd:ee:ff").unwrap();
        assert_eq!(
            request,
            "tink.inventory-request.aa_3abb_3acc_3add_3aee_3aff"
        );
        assert_eq!(agent_from_inventory_subject(&request), None);
        assert_eq!(
            agent_from_inventory_subject(&subject).as_deref(),
            Some("aa:bb:cc:dd:ee:ff")
        );
        assert_eq!(
            agent_from_inventory_subject(&dispatch_subject("aa:bb:cc:dd:ee:ff").unwrap()),
            None
        );
    }
}
