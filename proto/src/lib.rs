//! The workflow v2 gRPC protocol (tinkerbell seeds/004 Appendix B, extended compatibly).
//!
//! The protobuf lives in `proto/workflow/v2/workflow.proto`; every difference from the seed's
//! Appendix B (one typo fix, several compatible extensions) is documented there. The protobuf
//! package stays `internal.proto.workflow.v2`, as in the seed, so the gRPC method paths are the
//! same as Tinkerbell's (`/internal.proto.workflow.v2.WorkflowService/GetWorkflows`).
#![forbid(unsafe_code)]

pub mod codec;

/// The protobuf packages, by their version.
pub mod workflow {
    /// `internal.proto.workflow.v2`: messages, `workflow_service_client` and
    /// `workflow_service_server` (agents), `log_service_client` and `log_service_server`
    /// (operators reading action output, an extension).
    pub mod v2 {
        #![allow(missing_docs, clippy::all, clippy::pedantic)]
        include!(concat!(env!("OUT_DIR"), "/internal.proto.workflow.v2.rs"));
    }
}

#[cfg(test)]
mod tests {
    use super::workflow::v2::{
        Event, GetWorkflowsResponse, Workflow, event, get_workflows_response, workflow,
    };
    use prost::Message;

    #[test]
    fn start_workflow_round_trips_with_extensions() {
        let cmd = GetWorkflowsResponse {
            cmd: Some(get_workflows_response::Cmd::StartWorkflow(
                get_workflows_response::StartWorkflow {
                    workflow: Some(Workflow {
                        workflow_id: "default/wf".into(),
                        actions: vec![workflow::Action {
                            id: "a1".into(),
                            name: "disk-wipe".into(),
                            image: "busybox".into(),
                            cmd: Some("/bin/sh".into()),
                            args: vec!["-c".into(), "true".into()],
                            ns: Some(workflow::action::Namespace {
                                pid: Some("host".into()),
                                net: None,
                            }),
                            timeout_seconds: Some(60),
                            ..Default::default()
                        }],
                        env: [("A".to_string(), "1".to_string())].into(),
                        volumes: vec!["/dev:/dev".into()],
                    }),
                },
            )),
            trace_context: [(
                "traceparent".to_string(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
            )]
            .into(),
        };
        let bytes = cmd.encode_to_vec();
        let back = GetWorkflowsResponse::decode(bytes.as_slice()).expect("decodes what it encoded");
        assert_eq!(back, cmd);
    }

    /// The seed's field numbers are kept (hand-written wire bytes decode as the seed defines
    /// them), and fields from a newer peer are skipped rather than refused.
    #[test]
    fn seed_fields_keep_their_numbers() {
        // Field 1 = workflow_id, field 2 = action_started{action_id = 1}.
        let wire = [
            0x0a, 0x02, b'w', b'f', // workflow_id = "wf"
            0x12, 0x04, 0x0a, 0x02, b'a', b'1', // action_started { action_id = "a1" }
        ];
        let event = Event::decode(wire.as_slice()).expect("valid wire bytes");
        assert_eq!(event.workflow_id, "wf");
        assert_eq!(
            event.event,
            Some(event::Event::ActionStarted(event::ActionStarted {
                action_id: "a1".into()
            }))
        );
        // An unknown field number (here 15, a future extension) is skipped, not an error.
        let mut future = wire.to_vec();
        future.extend_from_slice(&[0x7a, 0x01, b'x']);
        let event = Event::decode(future.as_slice()).expect("unknown fields are skipped");
        assert_eq!(event.workflow_id, "wf");
    }
}
