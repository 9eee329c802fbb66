//! What a rendered Workflow must satisfy before it is prepared: every action has an image, the
//! rendered status fits in a Kubernetes object, and the StartWorkflow command fits in a NATS
//! message. A Template that breaks one fails the Workflow with `RenderFailed` and the field
//! path, instead of a status write or a publish failing on every retry.

use tink_api::v1alpha2::{Action, ActionState, ActionStatus, WorkflowStatus};

/// The most bytes the rendered actions may take in the Workflow status (JSON). etcd refuses
/// objects over 1.5 MiB, and the object also holds its spec, metadata and the last-applied
/// annotation of `kubectl apply`.
pub const MAX_STATUS_ACTIONS_BYTES: usize = 512 * 1024;

/// The most bytes a StartWorkflow command may take on the bus (NATS's default max payload is
/// 1 MiB; headers and the trace context need room).
pub const MAX_COMMAND_BYTES: usize = 1_000_000;

/// Checks the rendered actions; the error names the field and the limit.
pub fn check(actions: &[Action]) -> Result<(), String> {
    for (i, a) in actions.iter().enumerate() {
        if a.image.trim().is_empty() {
            return Err(format!(
                "spec.actions[{i}].image ({}): rendered to an empty image reference",
                a.name
            ));
        }
    }
    let statuses: Vec<ActionStatus> = actions
        .iter()
        .enumerate()
        .map(|(i, rendered)| ActionStatus {
            id: tink_workflow::action_id(i, &rendered.name),
            rendered: rendered.clone(),
            state: ActionState::Pending,
            ..ActionStatus::default()
        })
        .collect();
    let size = serde_json::to_vec(&statuses).map_or(usize::MAX, |v| v.len());
    if size > MAX_STATUS_ACTIONS_BYTES {
        return Err(format!(
            "status.actions: the rendered actions take {size} bytes, more than the {MAX_STATUS_ACTIONS_BYTES} a Workflow status may hold; move large values out of the Template (for example into a file an action downloads)"
        ));
    }
    let status = WorkflowStatus {
        actions: statuses,
        ..WorkflowStatus::default()
    };
    // The longest dispatch id a Workflow can have.
    let id = "x".repeat(tink_workflow::MAX_DISPATCH_ID_LEN);
    let command = crate::effects::start_command(&id, &status);
    let bytes = prost::Message::encoded_len(&command);
    if bytes > MAX_COMMAND_BYTES {
        return Err(format!(
            "spec.actions: the StartWorkflow command would take {bytes} bytes, more than the {MAX_COMMAND_BYTES} a bus message may carry"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn action(name: &str, image: &str) -> Action {
        Action {
            name: name.into(),
            image: image.into(),
            ..Action::default()
        }
    }

    #[test]
    fn empty_images_are_named() {
        let e = check(&[action("a", "busybox"), action("b", "  ")]).unwrap_err();
        assert!(e.starts_with("spec.actions[1].image (b)"), "{e}");
        assert!(check(&[action("a", "busybox")]).is_ok());
    }

    #[test]
    fn an_oversized_status_is_refused() {
        let mut a = action("big", "busybox");
        a.env.insert("BLOB".into(), "x".repeat(600 * 1024));
        let e = check(&[a]).unwrap_err();
        assert!(e.starts_with("status.actions:"), "{e}");
    }
}
