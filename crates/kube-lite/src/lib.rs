//! A small Kubernetes-compatible API server for tests and the local development stack (never
//! used in production).
//!
//! The real `kube` client (with kube-runtime watchers and controllers), `kubectl` v1.32 and our
//! webhooks talk to it over loopback HTTP (no TLS, no authorization: every request is allowed
//! as admin).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = kube_lite::Server::start(kube_lite::Config::default()).await?;
//! server.write_kubeconfig("/tmp/kubeconfig")?;
//! let client: kube::Client = server.client()?;
//! # drop(client);
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # What it implements
//!
//! - Discovery: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}`, `/apis/{group}/{version}`
//!   (legacy discovery; kubectl's request for aggregated discovery gets plain JSON, which makes
//!   it fall back). `/openapi/v3` lists every group/version with a document whose PATCH
//!   operations declare `fieldValidation`, so kubectl leaves validation to the server and sends
//!   `fieldValidation=Strict`, which the server honours for CRDs (unknown fields are refused with
//!   400, as kube-apiserver does); `/openapi/v2` is an empty document. No schemas are published
//!   (`kubectl explain` has nothing to show).
//! - Built-in types, stored as plain JSON objects without type-specific behaviour beyond what is
//!   listed: Namespace, ConfigMap, Secret (`stringData` folded into `data`, base64 checked),
//!   Event (see below), ServiceAccount, Service,
//!   coordination.k8s.io Lease, apps/v1 Deployment (status subresource, generation; no
//!   controller acts on it), apiextensions.k8s.io/v1 CustomResourceDefinition,
//!   admissionregistration.k8s.io/v1 Validating- and MutatingWebhookConfiguration.
//! - CRDs register their resource for every served version at once (status `Established`).
//!   Deleting a CRD deletes its objects at once, finalizers notwithstanding.
//! - create, get, list, update (PUT), patch (JSON merge patch, JSON patch, strategic merge
//!   patch, server-side apply), delete, deletecollection; `dryRun=All`.
//! - `resourceVersion` from one global counter; `409 Conflict` on a stale PUT or a patch that
//!   carries a `metadata.resourceVersion`; a write that changes nothing keeps the resourceVersion
//!   and sends no event; `generation` starts at 1 and grows when anything but `metadata` and
//!   `status` changes (custom resources, Deployments, CustomResourceDefinitions and webhook
//!   configurations); `uid` and `creationTimestamp` set by the server.
//! - Status subresource: writes to the main resource keep the stored `.status`, writes to
//!   `/status` change only `.status`.
//! - Finalizers: delete sets `deletionTimestamp` and keeps the object until the finalizers are
//!   gone; adding a finalizer once deletion started is refused (422). Namespaces terminate: their
//!   objects are deleted, and the namespace goes once it is empty; creating in a terminating
//!   namespace is refused (403); creating in a missing namespace is 404.
//! - Owner references: background garbage collection when an owner goes (an object whose every
//!   owner is gone is deleted; a remaining owner keeps it), `Orphan` and `Foreground` policies.
//! - Label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`) and field selectors (any
//!   dotted path compared as a string, including `metadata.name` and `metadata.namespace`;
//!   Events accept only kube-apiserver's labels, see below); `limit` + `continue`.
//! - Events: core `v1` and `events.k8s.io/v1` Events are one store served in both versions, as
//!   kube-apiserver does: stored in the core form and converted on every read, write, patch and
//!   watch (`regarding`/`involvedObject`, `note`/`message`, `reportingController`/
//!   `reportingComponent`, `deprecatedSource`/`source`, `deprecatedCount`/`count`,
//!   `deprecatedFirstTimestamp`/`firstTimestamp`, `deprecatedLastTimestamp`/`lastTimestamp`;
//!   `series`, `related`, `eventTime`, `action`, `reportingInstance` keep their names), so what
//!   kube-runtime's `Recorder` publishes shows in `kubectl describe`. Field selectors on core
//!   Events: `involvedObject.{kind,namespace,name,uid,apiVersion,resourceVersion,fieldPath}`,
//!   `reason`, `reportingComponent`, `source` (`source.component`, else `reportingComponent`),
//!   `type`, `metadata.name`, `metadata.namespace`; on events.k8s.io the `regarding.*`
//!   equivalents, `reason`, `type`, `reportingController` and the metadata ones. Any other
//!   label is `400 field label not supported`.
//! - Watch: rv unset or `0` sends the current objects as ADDED first; `resourceVersion=N`
//!   replays later events from history; `sendInitialEvents=true` ends the initial ADDED events
//!   with the `k8s.io/initial-events-end` BOOKMARK; periodic BOOKMARKs with
//!   `allowWatchBookmarks=true`; a resourceVersion older than the kept history
//!   ([`Config::watch_history`] events) gets an ERROR event with a 410 `Expired` Status; a
//!   change that moves an object in or out of a selector is sent as ADDED or DELETED.
//! - CRD validation: pruning of unknown fields (except under
//!   `x-kubernetes-preserve-unknown-fields`), `default`s, OpenAPI v3 value validation (type,
//!   nullable, int-or-string, enum, pattern, min/max and exclusive forms, multipleOf,
//!   min/maxLength, min/maxItems, min/maxProperties, required, list-type set/map uniqueness,
//!   allOf/anyOf/oneOf/not) and CEL `x-kubernetes-validations` including transition rules
//!   (`oldSelf`), through the `kube-cel` crate; failures are `422 Invalid` with field paths and
//!   messages phrased as kube-apiserver phrases them. CEL rules run only when the OpenAPI
//!   checks pass.
//! - Admission: Mutating (JSONPatch responses) then Validating webhook configurations, matched
//!   on rules (operations, groups, versions, resources with subresources, scope),
//!   `namespaceSelector` and `objectSelector`, called with an AdmissionReview v1 over HTTPS with
//!   the `caBundle` as the only trust anchor, `timeoutSeconds` (default 10) and `failurePolicy`.
//!   `matchConditions`, `matchPolicy: Equivalent` and `reinvocationPolicy` are not implemented.
//!   Webhooks see the object in the version the client used (a real API server does too when
//!   the rules list that version; with `matchPolicy: Equivalent` and only another version
//!   listed it would convert the object first). The webhooks' `response.warnings` (allowed or
//!   denied) go back to the client as `Warning: 299 - "<text>"` headers, deduplicated and
//!   limited to 4096 characters per request (each cut to 256 when they are more), as
//!   kube-apiserver writes them; kubectl prints them as `Warning: <text>` on stderr.
//! - CRD conversion: `strategy: Webhook` sends a ConversionReview v1 whenever an object is read
//!   or written in a version other than the storage version; `None` rewrites `apiVersion`.
//!   A `clientConfig.service` is resolved through [`Config::services`] and its certificate is
//!   checked for `name.namespace.svc`, as a real API server does. Plain `http://` URLs are
//!   accepted too (a real server refuses them).
//! - Persistence with [`Config::data_dir`]: an embedded redb database written by a background
//!   thread in batches, at most one commit per 25 ms (so up to a few tens of milliseconds behind
//!   the API answer; a clean shutdown flushes).
//! - Events are deleted an hour after their last write, as kube-apiserver's `--event-ttl` does
//!   ([`Config::event_ttl`], `--event-ttl-seconds`; 0 keeps them), with the DELETED watch event;
//!   after a restart, by the last write their own times record.
//! - Server-side printing (`kubectl get` asks for a Table): CRD `additionalPrinterColumns` and
//!   kubectl's usual columns for Namespace, ConfigMap, Secret, Deployment and Lease.
//! - RBAC objects (rbac.authorization.k8s.io/v1 Role, ClusterRole, RoleBinding,
//!   ClusterRoleBinding) are stored like any built-in type, and two create-only reviews read
//!   them for components that delegate authentication and authorization (see [`auth`]):
//!   authentication.k8s.io/v1 `TokenReview`, answered from a static token file
//!   ([`Config::token_file`], `--token-file`: kube-apiserver's `token,user,uid,"group1,group2"`
//!   CSV; the written kubeconfig's own token is the user `kube-lite-admin` in `system:masters`),
//!   and authorization.k8s.io/v1 `SubjectAccessReview`, evaluated against the stored RBAC
//!   objects as kube-apiserver's RBAC authorizer does (no ClusterRole aggregation). This is for
//!   tests and the development stack only: the reviews are answers for *others*; kube-lite's own
//!   requests are still never authorized (every one is allowed). A request whose
//!   `Authorization: Bearer <token>` the token file knows is named as that user (its groups plus
//!   `system:authenticated`) in the `userInfo` of the AdmissionReviews it causes, so webhooks can
//!   ask a SubjectAccessReview about who asked; no token, an unknown one or the admin token is
//!   `kube-lite-admin` in `system:masters`.
//! - Watch on a named object path (`.../configmaps/NAME?watch=true`).
//! - Errors are `Status` objects with the right code: 400 malformed bodies and selectors, 404,
//!   405, 406 (no JSON in `Accept`), 409, 410, 413, 415 (unknown content type), 422, 500.
//!
//! # Simplifications (differences from kube-apiserver)
//!
//! - Server-side apply merges the applied configuration into the live object (maps merge,
//!   lists and scalars replace, explicit nulls remove) and records each applier's fields in
//!   `managedFields` (lists count as one field); a field the same manager applied before and
//!   no longer applies is removed unless another applier applies it too. Fields written by
//!   updates (PUT, patches) are not tracked, conflicts are never reported, and `force` is
//!   accepted and ignored.
//! - Strategic merge patch knows merge keys by field name (`containers`, `env`, `volumes`,
//!   `ports`, `volumeMounts`, `conditions`, ... from a table, not from the OpenAPI schema);
//!   other lists replace. Custom resources accept it too (a real server answers 415).
//! - `limit`/`continue` pages read the latest state (no snapshot at the first page's
//!   resourceVersion) and continue tokens never expire; `resourceVersionMatch=Exact` with any
//!   resourceVersion but the latest gets 410.
//! - A list or get at a specific `resourceVersion` returns the latest state.
//! - No authentication or authorization of its own requests (see the reviews above), no quotas, defaulting of built-in types (except a Secret's
//!   `type`), validation of built-in types beyond names, labels and Secret data, Pods, or
//!   controllers (a Deployment never gets replicas). `gracePeriodSeconds` is ignored. Unknown
//!   fields of built-in types are stored, even with `fieldValidation=Strict`.
//! - A `Foreground` delete removes the dependents first, then the owner, at once (no
//!   `foregroundDeletion` finalizer); an owner reference to an object that never existed is not
//!   collected.
//! - Validating webhooks are called one after the other, not in parallel.
//! - No validation ratcheting: on update, every field is validated, changed or not.
//! - Unknown fields are pruned silently with `fieldValidation=Warn` (the default of the `kube`
//!   client): no `Warning` header is sent.
//! - Events get no validation of their fields (a real server requires `eventTime`,
//!   `reportingController`, ... on events.k8s.io) and no defaulting; events.k8s.io Events
//!   persisted by an older kube-lite (kept apart then) are not migrated into the shared store.
//! - Table output covers CRD printer columns and a few built-in types. Protobuf request bodies are
//!   decoded only for Namespace, ConfigMap, Secret and ServiceAccount (what `kubectl create
//!   namespace|configmap|secret|serviceaccount` sends); answers are always JSON.
//! - A watcher that falls more than 4096 events behind is closed; it re-watches from its last
//!   resourceVersion like any client after a dropped connection.
#![forbid(unsafe_code)]

mod admission;
mod api;
mod apply;
pub mod auth;
mod crd;
pub mod error;
mod events;
mod lifecycle;
mod metrics;
mod openapi;
mod proto;
mod registry;
mod schema;
pub mod selector;
mod server;
mod smp;
mod store;
mod table;
mod warnings;
mod watch;
mod webhook;

pub use api::{KUBERNETES_VERSION, decode_body};
pub use error::{ApiError, Error};
pub use metrics::RequestKey;
pub use server::{Config, RunningServer, Server, kubeconfig_yaml};
