//! `LogService.ReadLogs`: a Workflow's action output for operators, under Kubernetes RBAC.
//!
//! The caller is authenticated and authorised first ([`crate::log_access`]: `get` on
//! `workflows/log`); then the server reads the Workflow with its own identity (its current
//! dispatch id and action names) and streams the lines stored in the logs stream, then new ones
//! with `follow`, through [`tink_bus::read_logs`], the reader `tinkctl workflow logs --nats-url`
//! uses too.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube::api::Api;
use tink_api::v1alpha2::Workflow;
use tink_bus::proto::log_service_server::LogService;
use tink_bus::proto::{ReadLogsRequest, ReadLogsResponse};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::{debug, warn};

use crate::log_access::{LogAccess, bearer_token};
use crate::metrics::Metrics;

pub use tink_bus::NOT_DISPATCHED_HEADER;
/// Lines queued per call before the reader waits for the client.
const QUEUE: usize = 128;
/// How often a follower re-reads a Workflow that has no dispatch id yet.
const DISPATCH_POLL: Duration = Duration::from_secs(1);
/// The longest namespace or name accepted (Kubernetes names are shorter).
const MAX_NAME_LEN: usize = 253;

/// The operator-facing log reader of one replica.
#[derive(Clone)]
pub(crate) struct LogReader {
    /// The logs stream's JetStream context.
    pub jetstream: async_nats::jetstream::Context,
    /// Kubernetes access; `None` when the server was started without it.
    pub access: Option<Arc<LogAccess>>,
    /// The server's metrics.
    pub metrics: Metrics,
    /// Ends followers on shutdown.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// Calls being served at once (each holds a stream and, following, re-reads its Workflow);
    /// one more is refused with RESOURCE_EXHAUSTED.
    pub readers: Arc<tokio::sync::Semaphore>,
    /// How often a follower's token and permission are checked again: a revoked token or a
    /// removed RoleBinding ends its stream within this long.
    pub reauthorize: Duration,
}

type LineStream = Pin<Box<dyn Stream<Item = Result<ReadLogsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl LogService for LogReader {
    type ReadLogsStream = LineStream;

    async fn read_logs(
        &self,
        request: Request<ReadLogsRequest>,
    ) -> Result<Response<Self::ReadLogsStream>, Status> {
        let result = self.start(request).await;
        self.metrics.log_read(match &result {
            Ok(_) => "allowed",
            Err(s) => match s.code() {
                tonic::Code::Unauthenticated => "unauthenticated",
                tonic::Code::PermissionDenied => "denied",
                tonic::Code::InvalidArgument | tonic::Code::NotFound => "invalid",
                tonic::Code::FailedPrecondition => "not_configured",
                tonic::Code::ResourceExhausted => "busy",
                _ => "error",
            },
        });
        result
    }
}

impl LogReader {
    async fn start(
        &self,
        request: Request<ReadLogsRequest>,
    ) -> Result<Response<LineStream>, Status> {
        let Some(access) = self.access.clone() else {
            return Err(Status::failed_precondition(
                "log reading is not configured on this server: start it with --kubeconfig or --kube-in-cluster so it can check callers with the Kubernetes API",
            ));
        };
        let token = bearer_token(request.metadata())?.to_string();
        let request = request.into_inner();
        for (field, value) in [("namespace", &request.namespace), ("name", &request.name)] {
            if value.is_empty() || value.len() > MAX_NAME_LEN {
                return Err(Status::invalid_argument(format!(
                    "{field}: must be 1 to {MAX_NAME_LEN} bytes"
                )));
            }
        }
        // Who the caller is and whether it may read, before it takes a reader slot: callers
        // without a valid token cannot exhaust the slots of those with one.
        let caller = access.authenticate(&token).await?;
        access
            .authorize(&caller, &request.namespace, &request.name)
            .await?;
        let permit = self.readers.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(
                "this server serves as many log readers as --log-readers-max allows; retry later or on another server",
            )
        })?;
        let recheck = Recheck {
            access: access.clone(),
            token,
            namespace: request.namespace.clone(),
            name: request.name.clone(),
            every: self.reauthorize,
        };
        debug!(user = %caller.name, namespace = %request.namespace, name = %request.name, "reading logs");

        let api: Api<Workflow> = Api::namespaced(access.client().clone(), &request.namespace);
        let wf = self.dispatched(&api, &request).await?;
        let Some(wf) = wf else {
            let mut response = Response::new(Box::pin(futures::stream::empty()) as LineStream);
            response.metadata_mut().insert(
                NOT_DISPATCHED_HEADER,
                tonic::metadata::MetadataValue::from_static("true"),
            );
            return Ok(response);
        };
        let status = wf.status.unwrap_or_default();
        let dispatch = status.dispatch_id.unwrap_or_default();
        let selection = tink_bus::LogSelection::new(
            &dispatch,
            status
                .actions
                .iter()
                .map(|a| (a.id.clone(), a.rendered.name.clone())),
            Some(request.action.as_str()),
        )
        .map_err(|e| match e {
            tink_bus::SelectionError::NoSuchAction { .. } => {
                Status::invalid_argument(e.to_string())
            }
            tink_bus::SelectionError::Token(e) => {
                Status::internal(format!("the workflow's dispatch id is unusable: {e}"))
            }
        })?;
        let options = tink_bus::ReadOptions {
            since: (request.since_seconds > 0).then(|| Duration::from_secs(request.since_seconds)),
            follow: request.follow,
        };
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
        let jetstream = self.jetstream.clone();
        let metrics = self.metrics.clone();
        let shutdown = self.shutdown.clone();
        let name = request.name.clone();
        tokio::spawn(async move {
            // Held until the stream ends.
            let _permit = permit;
            let ended = || {
                let api = api.clone();
                let name = name.clone();
                async move {
                    match api.get_opt(&name).await {
                        Ok(Some(w)) => w.status.is_none_or(|s| s.state.is_terminal()),
                        Ok(None) => true,
                        // Unknown: keep following; the next check may succeed.
                        Err(_) => false,
                    }
                }
            };
            let emit = |line: tink_bus::ReadLine| {
                let tx = tx.clone();
                let metrics = metrics.clone();
                async move {
                    let sent = tx
                        .send(Ok(ReadLogsResponse {
                            action_id: line.action_id,
                            action_name: line.action_name,
                            line: Some(line.line),
                        }))
                        .await
                        .is_ok();
                    if sent {
                        metrics.log_lines_served.inc();
                    }
                    sent
                }
            };
            let read = tink_bus::read_logs(&jetstream, &selection, options, ended, emit);
            let result = tokio::select! {
                r = read => r,
                _ = shutdown.cancelled() => {
                    let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
                    return;
                }
                _ = tx.closed() => return,
                status = recheck.until_refused(), if options.follow => {
                    metrics.log_read(match status.code() {
                        tonic::Code::PermissionDenied => "revoked",
                        tonic::Code::Unauthenticated => "token_revoked",
                        _ => "recheck_failed",
                    });
                    let _ = tx.send(Err(status)).await;
                    return;
                }
            };
            match result {
                Ok(summary) if summary.malformed > 0 => {
                    warn!(
                        malformed = summary.malformed,
                        "skipped malformed stored log batches"
                    )
                }
                Ok(_) => {}
                Err(e) => {
                    metrics.error("read_logs");
                    let _ = tx.send(Err(Status::unavailable(e.to_string()))).await;
                }
            }
        });
        Ok(Response::new(
            Box::pin(ReceiverStream::new(rx)) as LineStream
        ))
    }

    /// The Workflow once it has a dispatch id; `None` when it has none and will not get one
    /// (not following, or ended).
    async fn dispatched(
        &self,
        api: &Api<Workflow>,
        request: &ReadLogsRequest,
    ) -> Result<Option<Workflow>, Status> {
        loop {
            let wf = api
                .get_opt(&request.name)
                .await
                .map_err(|e| Status::unavailable(format!("cannot read the workflow: {e}")))?
                .ok_or_else(|| {
                    Status::not_found(format!(
                        "workflow {}/{} not found",
                        request.namespace, request.name
                    ))
                })?;
            let status = wf.status.as_ref();
            if status.and_then(|s| s.dispatch_id.as_ref()).is_some() {
                return Ok(Some(wf));
            }
            if !request.follow || status.is_some_and(|s| s.state.is_terminal()) {
                return Ok(None);
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return Err(Status::unavailable("the server is shutting down")),
                _ = tokio::time::sleep(DISPATCH_POLL) => {}
            }
        }
    }
}

/// A follower's access, checked again every `every` for as long as it follows.
struct Recheck {
    access: Arc<LogAccess>,
    token: String,
    namespace: String,
    name: String,
    every: Duration,
}

impl Recheck {
    /// Returns the refusal once the token is no longer accepted or the permission is gone;
    /// never while both hold. An API server that cannot be asked is tolerated for one more
    /// period (a blip must not end every follower), then the stream ends with UNAVAILABLE: an
    /// unchecked reader must not go on for ever.
    async fn until_refused(&self) -> Status {
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            tokio::time::sleep(self.every).await;
            let checked = match self.access.authenticate(&self.token).await {
                Ok(caller) => {
                    self.access
                        .authorize(&caller, &self.namespace, &self.name)
                        .await
                }
                Err(e) => Err(e),
            };
            match checked {
                Ok(()) => failing_since = None,
                Err(s)
                    if matches!(
                        s.code(),
                        tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
                    ) =>
                {
                    debug!(namespace = %self.namespace, name = %self.name, "follower's access revoked");
                    return s;
                }
                Err(s) => {
                    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                    warn!(error = %s, "cannot re-check a log follower's access");
                    if since.elapsed() >= self.every {
                        return Status::unavailable(format!(
                            "this server cannot re-check your access to the logs: {}",
                            s.message()
                        ));
                    }
                }
            }
        }
    }
}
