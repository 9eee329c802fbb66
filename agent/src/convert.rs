//! From the protocol's `Workflow` to what the runner consumes.

use std::collections::BTreeMap;
use std::time::Duration;

use tink_proto::workflow::v2::{Workflow, workflow};

use crate::reason::{Failure, FailureReason};
use crate::spec::{ActionSpec, Volume, merge_env, merge_volumes};

/// Builds the runner's view of one action: template env and volumes merged under the action's
/// own, namespaces, timeout (`0` or unset: none). A malformed volume or variable name is an
/// `InvalidAction` failure of that action.
pub fn action_spec(workflow: &Workflow, action: &workflow::Action) -> Result<ActionSpec, Failure> {
    let invalid = |message: String| Failure {
        reason: FailureReason::InvalidAction,
        message,
    };
    let parse = |specs: &[String]| -> Result<Vec<Volume>, Failure> {
        specs
            .iter()
            .map(|s| s.parse::<Volume>().map_err(|e| invalid(e.to_string())))
            .collect()
    };
    let template_env: BTreeMap<String, String> = workflow.env.clone().into_iter().collect();
    let action_env: BTreeMap<String, String> = action.env.clone().into_iter().collect();
    let env = merge_env(&template_env, &action_env).map_err(|e| invalid(e.to_string()))?;
    let volumes = merge_volumes(&parse(&workflow.volumes)?, &parse(&action.volumes)?);
    let ns = action.ns.as_ref();
    let non_empty = |s: Option<&String>| s.filter(|s| !s.trim().is_empty()).cloned();
    Ok(ActionSpec {
        id: action.id.clone(),
        name: if action.name.is_empty() {
            action.id.clone()
        } else {
            action.name.clone()
        },
        image: action.image.clone(),
        cmd: non_empty(action.cmd.as_ref()),
        args: action.args.clone(),
        env,
        volumes,
        pid_mode: non_empty(ns.and_then(|n| n.pid.as_ref())),
        network_mode: non_empty(ns.and_then(|n| n.net.as_ref())),
        timeout: action
            .timeout_seconds
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow_with(action: workflow::Action) -> Workflow {
        Workflow {
            workflow_id: "ns/wf".into(),
            actions: vec![action],
            env: [
                ("A".to_owned(), "t".to_owned()),
                ("B".to_owned(), "t".to_owned()),
            ]
            .into(),
            volumes: vec!["/dev:/dev".into(), "/a:/shared".into()],
        }
    }

    #[test]
    fn converts_with_template_defaults() {
        let action = workflow::Action {
            id: "a1".into(),
            name: "".into(),
            image: "img:1".into(),
            cmd: Some("/bin/sh".into()),
            args: vec!["-c".into(), "true".into()],
            env: [("B".to_owned(), "a".to_owned())].into(),
            volumes: vec!["/b:/shared:ro".into()],
            ns: Some(workflow::action::Namespace {
                pid: Some("host".into()),
                net: Some(String::new()),
            }),
            timeout_seconds: Some(30),
        };
        let wf = workflow_with(action.clone());
        let spec = action_spec(&wf, &action).expect("valid");
        assert_eq!(spec.name, "a1");
        assert_eq!(spec.env["A"], "t");
        assert_eq!(spec.env["B"], "a");
        let vols: Vec<String> = spec.volumes.iter().map(ToString::to_string).collect();
        assert_eq!(vols, vec!["/dev:/dev:rw", "/b:/shared:ro"]);
        assert_eq!(spec.pid_mode.as_deref(), Some("host"));
        assert_eq!(spec.network_mode, None);
        assert_eq!(spec.timeout, Some(Duration::from_secs(30)));
        assert_eq!(spec.cmd.as_deref(), Some("/bin/sh"));
    }

    #[test]
    fn zero_timeout_means_none_and_bad_volumes_fail() {
        let mut action = workflow::Action {
            id: "a1".into(),
            image: "img".into(),
            timeout_seconds: Some(0),
            ..Default::default()
        };
        let wf = workflow_with(action.clone());
        assert_eq!(action_spec(&wf, &action).expect("valid").timeout, None);
        action.volumes = vec!["relative".into()];
        let err = action_spec(&wf, &action).expect_err("invalid volume");
        assert_eq!(err.reason, FailureReason::InvalidAction);
        assert!(err.message.contains("relative"), "{}", err.message);
    }
}
