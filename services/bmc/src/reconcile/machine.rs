//! A Machine: its power state read on a period (with jitter) and whenever its spec changes;
//! `status.powerState` and the `Contactable` condition written only when they change, with an
//! Event for each change.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource as _, ResourceExt as _};
use serde_json::json;
use tink_api::bmc::{ConditionStatus, Machine, MachineConditionType, MachineStatus, PowerState};
use tracing::debug;

use crate::context::Ctx;
use crate::error::Error;
use tink_runtime::jittered;

/// The longest wait before looking again at a BMC that did not answer.
const UNREACHABLE_RECHECK: std::time::Duration = std::time::Duration::from_secs(15);

/// What one look at a Machine's BMC found.
pub(crate) type Observation = Result<PowerState, String>;

/// The status after `observed`, from `current`: the power state (unknown when the BMC did not
/// answer) and `Contactable`, whose time changes only when its status does.
pub(crate) fn observed_status(current: &MachineStatus, observed: &Observation) -> MachineStatus {
    let mut status = current.clone();
    let now = Time(Timestamp::now());
    match observed {
        Ok(state) => {
            status.power = Some(*state);
            status.set_condition(
                MachineConditionType::Contactable,
                ConditionStatus::True,
                "",
                now,
            );
        }
        Err(message) => {
            status.power = Some(PowerState::Unknown);
            status.set_condition(
                MachineConditionType::Contactable,
                ConditionStatus::False,
                message,
                now,
            );
        }
    }
    status
}

fn contactable(s: &MachineStatus) -> Option<ConditionStatus> {
    s.condition(MachineConditionType::Contactable)
        .map(|c| c.status)
}

/// Writes `observed` into Machine `machine`'s status when it changes anything, with Events.
/// Used by the poll and by power tasks (which refresh the Machine at once).
pub(crate) async fn record(
    ctx: &Ctx,
    machine: &Machine,
    observed: &Observation,
) -> Result<(), Error> {
    let ns = machine.namespace().ok_or(Error::Unnamed("Machine"))?;
    let before = machine.status.clone().unwrap_or_default();
    let after = observed_status(&before, observed);
    if after == before {
        return Ok(());
    }
    let api: Api<Machine> = Api::namespaced(ctx.client.clone(), &ns);
    api.patch_status(
        &machine.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": after })),
    )
    .await?;
    let reference = machine.object_ref(&());
    if before.power != after.power
        && let Some(power) = after.power
        && power != PowerState::Unknown
    {
        let from = before.power.unwrap_or_default();
        // One reason per target state: Events of one reason about one object within minutes
        // are counted as a series of the first, whose note stays.
        let reason = if power == PowerState::On {
            "PoweredOn"
        } else {
            "PoweredOff"
        };
        ctx.event(
            &reference,
            false,
            reason,
            &format!("power state {from} -> {power}"),
        );
    }
    match (contactable(&before), contactable(&after), observed) {
        (Some(ConditionStatus::False), Some(ConditionStatus::True), _) => {
            ctx.event(&reference, false, "Contactable", "the BMC answers again");
        }
        (b, Some(ConditionStatus::False), Err(message)) if b != Some(ConditionStatus::False) => {
            ctx.event(&reference, true, "Unreachable", message);
        }
        _ => {}
    }
    Ok(())
}

/// Reads the Machine's power state and records it; next look after the poll period.
pub(crate) async fn reconcile(machine: Arc<Machine>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let ns = machine.namespace().ok_or(Error::Unnamed("Machine"))?;
    if machine.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let observed = match ctx.providers(&ns, &machine.spec.connection).await {
        Ok(providers) => ctx.power_state(&providers).await.map(|(_, s)| s),
        Err(e) => Err(e.to_string()),
    };
    debug!(machine = %machine.name_any(), namespace = %ns, ?observed, "power state read");
    record(&ctx, &machine, &observed).await?;
    // A BMC that did not answer is looked at again sooner, so one that comes back (or a
    // controller that was overloaded at start) is seen within seconds, not a poll period.
    let next = match observed {
        Ok(_) => ctx.config.power_poll,
        Err(_) => ctx.config.power_poll.min(UNREACHABLE_RECHECK),
    };
    Ok(Action::requeue(jittered(next)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contactable_time_changes_only_with_its_status() {
        let s0 = MachineStatus::default();
        let s1 = observed_status(&s0, &Ok(PowerState::On));
        assert_eq!(s1.power, Some(PowerState::On));
        assert_eq!(contactable(&s1), Some(ConditionStatus::True));
        let s2 = observed_status(&s1, &Ok(PowerState::On));
        assert_eq!(s1, s2, "nothing new: nothing to write");
        let s3 = observed_status(
            &s2,
            &Err("redfish 10.0.0.5: power state: no answer within 10s".into()),
        );
        assert_eq!(s3.power, Some(PowerState::Unknown));
        let c = s3
            .condition(MachineConditionType::Contactable)
            .expect("condition");
        assert_eq!(c.status, ConditionStatus::False);
        assert!(c.message.contains("no answer"));
    }
}
