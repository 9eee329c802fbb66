//! One way for a service to run its tasks and stop: the [`TaskGroup`].
//!
//! Before it, each service had its own: a copied `select!` over the HTTP server and a feed, a
//! `JoinSet` whose first finished task ended the rest, and detached `tokio::spawn`s that were
//! aborted at the end (so a dead watcher went unnoticed while the replica looked healthy). The
//! group does it once:
//!
//! - **Critical tasks** ([`TaskGroup::spawn_critical`]): the parts a service cannot serve
//!   without (its listener, its watches). One that ends, fails or panics while the group is
//!   running turns readiness off, adds a `/readyz` note naming it, and stops the group; the
//!   group then hands that failure back from [`TaskGroup::wait`], the service's run function
//!   returns it, and the process exits non-zero once its graceful shutdown has finished. A task
//!   that ends after the group began stopping is just stopping (an error then is logged).
//! - **Tracked tasks** ([`TaskGroup::spawn`]): short or best-effort work (one Hardware's reset,
//!   a backlog watch) that must be drained on shutdown but whose end means nothing.
//! - **Periodic tasks** ([`TaskGroup::spawn_periodic`]): named work run every period (and on
//!   demand through its [`Activator`]), each run's outcome recorded in one place
//!   ([`TaskGroup::periodic_status`]) and a failed run logged with the task's name: a run's
//!   error is reported, the next run tries again (the shape of omicron's background-task
//!   driver). The loop itself is critical: if it panics, the group stops.
//!
//! Stopping has one path: the group's [`CancellationToken`] ([`TaskGroup::token`], a child of
//! the service's shutdown token, so SIGTERM reaches it). Every task is given it (or watches it)
//! and returns when it is cancelled. Draining is bounded: tasks still running
//! [`TaskGroup::with_drain`] after the group began stopping are aborted and named in a warning,
//! so a wedged task cannot hold the process (the signal path has the process-wide forced exit
//! as well; a group stopped by a dead task has only this bound).
//!
//! The group is cheap to clone; a clone is a handle on the same group, so a module that spawns
//! per-object work takes a `&TaskGroup<E>` (or a clone) and calls [`TaskGroup::spawn`].
//! Dropping the last handle cancels the token and aborts every task still running, as dropping
//! a `JoinSet` does: a run function that is itself dropped (a replica killed in a test, a
//! term's future dropped) takes its tasks with it. A task that holds a handle keeps the group
//! alive, so give tasks the token and keep handles with the code that owns the group.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::{DEFAULT_SHUTDOWN_GRACE, Health};

/// Why a group stopped on its own: its first critical task that ended before shutdown.
#[derive(Debug, thiserror::Error)]
pub enum TaskFailure<E> {
    /// The task returned an error.
    #[error("{task} failed: {error}")]
    Failed {
        /// The task's name.
        task: String,
        /// Its error.
        error: E,
    },
    /// The task returned `Ok` although the group was not stopping.
    #[error("{task} ended on its own")]
    Ended {
        /// The task's name.
        task: String,
    },
    /// The task panicked.
    #[error("{task} panicked: {message}")]
    Panicked {
        /// The task's name.
        task: String,
        /// The panic's message, when it had one.
        message: String,
    },
}

impl<E: Display> TaskFailure<E> {
    /// The name of the task that stopped the group.
    pub fn task(&self) -> &str {
        match self {
            TaskFailure::Failed { task, .. }
            | TaskFailure::Ended { task }
            | TaskFailure::Panicked { task, .. } => task,
        }
    }

    /// The task's own error; for an end or a panic, `stopped` of this failure's description
    /// (a service's "stopped unexpectedly" variant).
    pub fn into_error(self, stopped: impl FnOnce(String) -> E) -> E {
        match self {
            TaskFailure::Failed { error, .. } => error,
            other => stopped(other.to_string()),
        }
    }
}

/// The last outcome of a periodic task, as [`TaskGroup::periodic_status`] reports it.
#[derive(Clone, Debug)]
pub struct PeriodicStatus {
    /// The task's name.
    pub name: String,
    /// Its period.
    pub period: Duration,
    /// Runs finished.
    pub runs: u64,
    /// Runs that returned an error.
    pub failures: u64,
    /// When the last run started.
    pub last_started: Option<Instant>,
    /// How long the last finished run took.
    pub last_duration: Option<Duration>,
    /// The last finished run's error, if it failed (cleared by a run that succeeds).
    pub last_error: Option<String>,
    /// Whether a run is under way.
    pub running: bool,
}

/// Runs a periodic task now instead of at the end of its period (several calls before the run
/// starts make one run).
#[derive(Clone, Debug)]
pub struct Activator(Arc<Notify>);

impl Activator {
    /// Asks for a run as soon as the current one (if any) has finished.
    pub fn activate(&self) {
        self.0.notify_one();
    }
}

/// A group of tasks that stop together: see the [module documentation](self).
///
/// `E` is the error type of its critical tasks (the service's own error), handed back
/// unchanged by [`TaskGroup::wait`] inside [`TaskFailure::Failed`].
pub struct TaskGroup<E> {
    inner: Arc<Inner<E>>,
    /// Shared by the handles only (never by the tasks): its drop is the last handle's.
    owner: Arc<Owner>,
    drain: Duration,
}

impl<E> Clone for TaskGroup<E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            owner: self.owner.clone(),
            drain: self.drain,
        }
    }
}

/// Tasks still running, by spawn number: their names (for the drain warning) and how to abort
/// them.
type Running = Arc<Mutex<BTreeMap<u64, (String, AbortHandle)>>>;

/// Stops the group's tasks when the last handle is dropped.
struct Owner {
    token: CancellationToken,
    running: Running,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.token.cancel();
        for (_, handle) in self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            handle.abort();
        }
    }
}

impl<E> std::fmt::Debug for TaskGroup<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskGroup")
            .field("stopping", &self.inner.token.is_cancelled())
            .field("tasks", &self.inner.tracker.len())
            .field("drain", &self.drain)
            .finish()
    }
}

struct Inner<E> {
    token: CancellationToken,
    health: Health,
    tracker: TaskTracker,
    /// The first critical task that ended before the group was stopping.
    failure: Mutex<Option<TaskFailure<E>>>,
    running: Running,
    next_id: AtomicU64,
    periodic: Mutex<Vec<Arc<Mutex<PeriodicStatus>>>>,
}

impl<E> Inner<E>
where
    E: Display + Send + 'static,
{
    /// Records a critical task's early end: readiness off, a note naming it, the group stops.
    fn fail(&self, failure: TaskFailure<E>) {
        tracing::error!(task = failure.task(), error = %failure, "a critical task stopped; stopping");
        self.health.set_ready(false);
        self.health
            .add_note(format!("stopping: the critical task {failure}"));
        {
            let mut first = self.failure.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                *first = Some(failure);
            }
        }
        self.token.cancel();
    }

    fn forget(&self, id: u64) {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
    }
}

fn panic_message(error: tokio::task::JoinError) -> String {
    if error.is_cancelled() {
        return "aborted".to_string();
    }
    match error.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_string()),
        Err(error) => error.to_string(),
    }
}

impl<E> TaskGroup<E>
where
    E: Display + Send + 'static,
{
    /// A running group whose token is a child of `shutdown`; `health` is turned not ready when
    /// the group stops, and carries the note of a critical task that ended early. Drains within
    /// [`DEFAULT_SHUTDOWN_GRACE`] unless [`TaskGroup::with_drain`] says otherwise. Must be called
    /// inside a Tokio runtime when tasks are spawned.
    pub fn new(health: Health, shutdown: &CancellationToken) -> Self {
        let token = shutdown.child_token();
        let running = Running::default();
        Self {
            inner: Arc::new(Inner {
                token: token.clone(),
                health,
                tracker: TaskTracker::new(),
                failure: Mutex::new(None),
                running: running.clone(),
                next_id: AtomicU64::new(0),
                periodic: Mutex::new(Vec::new()),
            }),
            owner: Arc::new(Owner { token, running }),
            drain: DEFAULT_SHUTDOWN_GRACE,
        }
    }

    /// The same group, draining within `drain` (how long tasks get, once it stops, before the
    /// ones still running are aborted).
    pub fn with_drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// The group's token: cancelled when the service shuts down, when a critical task ends
    /// early, or by [`TaskGroup::stop`]. Give it (a clone) to every task of the group.
    pub fn token(&self) -> &CancellationToken {
        &self.inner.token
    }

    /// Whether the group is stopping (or stopped).
    pub fn is_stopping(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Spawns `task` and returns its spawn number; `done` is called with its outcome once it
    /// has ended, after it has left the running set.
    fn spawn_tracked<T, F>(
        &self,
        name: String,
        task: F,
        done: impl FnOnce(&Inner<E>, String, Result<T, tokio::task::JoinError>) + Send + 'static,
    ) where
        T: Send + 'static,
        F: Future<Output = T> + Send + 'static,
    {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        // Registered before it can end, so `forget` never runs first.
        let mut running = self.inner.running.lock().unwrap_or_else(|e| e.into_inner());
        let handle = tokio::spawn(task);
        running.insert(id, (name.clone(), handle.abort_handle()));
        drop(running);
        let inner = self.inner.clone();
        self.inner.tracker.spawn(async move {
            let outcome = handle.await;
            inner.forget(id);
            done(&inner, name, outcome);
        });
    }

    /// Spawns a critical task: one the service cannot serve without. If it returns (`Ok` or
    /// `Err`) or panics while the group is running, the group fails: see the
    /// [module documentation](self). It must return once [`TaskGroup::token`] is cancelled.
    pub fn spawn_critical<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
    {
        self.spawn_tracked(name.into(), task, |inner, task, outcome| {
            let stopping = inner.token.is_cancelled();
            match outcome {
                Ok(Ok(())) if stopping => tracing::debug!(task, "stopped"),
                Ok(Err(error)) if stopping => {
                    tracing::warn!(task, %error, "failed while stopping")
                }
                Err(error) if stopping => {
                    tracing::warn!(task, error = %panic_message(error), "ended abnormally while stopping")
                }
                Ok(Ok(())) => inner.fail(TaskFailure::Ended { task }),
                Ok(Err(error)) => inner.fail(TaskFailure::Failed { task, error }),
                Err(error) => inner.fail(TaskFailure::Panicked {
                    task,
                    message: panic_message(error),
                }),
            }
        });
    }

    /// Spawns a tracked task: drained (and aborted after the drain) with the group, but its end
    /// means nothing to the group; a panic is logged with its name. It should return once
    /// [`TaskGroup::token`] is cancelled.
    pub fn spawn<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn_tracked(name.into(), task, |inner, task, outcome| {
            if let Err(error) = outcome
                && !(error.is_cancelled() && inner.token.is_cancelled())
            {
                tracing::error!(task, error = %panic_message(error), "a task ended abnormally");
            }
        });
    }

    /// Spawns a periodic task: `run` is called every `period` (the first time one period after
    /// the spawn, then one period after the previous run finished) and whenever the returned
    /// [`Activator`] asks, until the group stops. A run is not interrupted by the stop: it
    /// finishes (within the drain). A run's error is logged with the task's name and recorded
    /// in [`TaskGroup::periodic_status`]; the next run tries again.
    pub fn spawn_periodic<F, Fut, RunError>(
        &self,
        name: impl Into<String>,
        period: Duration,
        mut run: F,
    ) -> Activator
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), RunError>> + Send,
        RunError: Display,
    {
        let name = name.into();
        let status = Arc::new(Mutex::new(PeriodicStatus {
            name: name.clone(),
            period,
            runs: 0,
            failures: 0,
            last_started: None,
            last_duration: None,
            last_error: None,
            running: false,
        }));
        self.inner
            .periodic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(status.clone());
        let activator = Activator(Arc::new(Notify::new()));
        let (wake, token) = (activator.0.clone(), self.inner.token.clone());
        let task = name.clone();
        self.spawn_critical(name, async move {
            let set = |f: &dyn Fn(&mut PeriodicStatus)| {
                f(&mut status.lock().unwrap_or_else(|e| e.into_inner()));
            };
            loop {
                tokio::select! {
                    () = token.cancelled() => break,
                    () = tokio::time::sleep(period) => {}
                    () = wake.notified() => {}
                }
                let started = Instant::now();
                set(&|s| {
                    s.running = true;
                    s.last_started = Some(started);
                });
                let result = run().await;
                let error = match result {
                    Ok(()) => None,
                    Err(error) => {
                        tracing::warn!(task, %error, "a periodic task's run failed; the next run tries again");
                        Some(error.to_string())
                    }
                };
                set(&|s| {
                    s.running = false;
                    s.runs += 1;
                    s.failures += u64::from(error.is_some());
                    s.last_duration = Some(started.elapsed());
                    s.last_error.clone_from(&error);
                });
            }
            Ok(())
        });
        activator
    }

    /// The last outcome of every periodic task, in spawn order.
    pub fn periodic_status(&self) -> Vec<PeriodicStatus> {
        self.inner
            .periodic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .collect()
    }

    /// Names of the tasks still running.
    pub fn running(&self) -> Vec<String> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Waits until the group stops (shutdown, a critical task's early end, or
    /// [`TaskGroup::stop`]), then drains it within its drain bound. Returns the failure of the
    /// critical task that stopped it, if one did (to the first caller that gets this far).
    pub async fn wait(&self) -> Result<(), TaskFailure<E>> {
        self.inner.token.cancelled().await;
        self.drain_within(self.drain).await
    }

    /// Stops the group now and drains it within `drain` (instead of its own bound); returns as
    /// [`TaskGroup::wait`] does.
    pub async fn stop(&self, drain: Duration) -> Result<(), TaskFailure<E>> {
        self.inner.token.cancel();
        self.drain_within(drain).await
    }

    async fn drain_within(&self, drain: Duration) -> Result<(), TaskFailure<E>> {
        self.inner.health.set_ready(false);
        self.inner.tracker.close();
        if tokio::time::timeout(drain, self.inner.tracker.wait())
            .await
            .is_err()
        {
            let stuck: Vec<(String, AbortHandle)> = self
                .inner
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .cloned()
                .collect();
            let names: Vec<&str> = stuck.iter().map(|(name, _)| name.as_str()).collect();
            tracing::warn!(?drain, tasks = ?names, "tasks did not stop within the drain; aborting them");
            for (_, handle) in &stuck {
                handle.abort();
            }
            self.inner.tracker.wait().await;
        }
        // Again: a task that finished its work while stopping may have turned it on.
        self.inner.health.set_ready(false);
        match self
            .inner
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[derive(Debug, PartialEq)]
    struct Oops(&'static str);

    impl Display for Oops {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    fn new_group() -> (TaskGroup<Oops>, Health, CancellationToken) {
        let health = Health::new();
        health.set_ready(true);
        let shutdown = CancellationToken::new();
        (TaskGroup::new(health.clone(), &shutdown), health, shutdown)
    }

    /// A critical task that runs until the group stops.
    fn until_stopped(group: &TaskGroup<Oops>) -> impl Future<Output = Result<(), Oops>> + use<> {
        let token = group.token().clone();
        async move {
            token.cancelled().await;
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_failing_critical_task_fails_readiness_and_the_group() {
        let (group, health, shutdown) = new_group();
        group.spawn_critical("listener", until_stopped(&group));
        group.spawn_critical("secrets watch", async { Err(Oops("the watch ended")) });
        let failure = group.wait().await.expect_err("the group fails");
        assert_eq!(failure.task(), "secrets watch");
        assert!(
            matches!(&failure, TaskFailure::Failed { error, .. } if *error == Oops("the watch ended"))
        );
        assert!(!health.is_ready());
        assert_eq!(
            health.notes(),
            ["stopping: the critical task secrets watch failed: the watch ended"]
        );
        assert!(
            !shutdown.is_cancelled(),
            "the service's token is the caller's to cancel"
        );
        assert!(group.running().is_empty(), "the other task was drained");
    }

    #[tokio::test]
    async fn a_critical_task_that_ends_or_panics_early_fails_the_group() {
        let (group, health, _shutdown) = new_group();
        group.spawn_critical("takeover listener", async { Ok(()) });
        let failure = group.wait().await.expect_err("an early end is a failure");
        assert!(matches!(failure, TaskFailure::Ended { ref task } if task == "takeover listener"));
        assert_eq!(
            failure.into_error(Oops::from_string),
            Oops("takeover listener ended on its own")
        );
        assert!(!health.is_ready());

        let (group, health, _shutdown) = new_group();
        group.spawn_critical("feed", async { panic!("boom") });
        let failure = group.wait().await.expect_err("a panic is a failure");
        assert!(
            matches!(&failure, TaskFailure::Panicked { task, message } if task == "feed" && message == "boom")
        );
        assert_eq!(
            health.notes(),
            ["stopping: the critical task feed panicked: boom"]
        );
    }

    impl Oops {
        fn from_string(s: String) -> Oops {
            Oops(Box::leak(s.into_boxed_str()))
        }
    }

    #[tokio::test]
    async fn shutdown_stops_the_group_cleanly() {
        let (group, health, shutdown) = new_group();
        group.spawn_critical("server", until_stopped(&group));
        let token = group.token().clone();
        group.spawn_critical("feed", async move {
            token.cancelled().await;
            // An error while stopping is not the group's failure.
            Err(Oops("the watch was cut"))
        });
        shutdown.cancel();
        group.wait().await.expect("a shutdown is no failure");
        assert!(!health.is_ready());
        assert!(health.notes().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_drain_is_bounded() {
        let (group, _health, shutdown) = new_group();
        let group = group.with_drain(Duration::from_secs(3));
        group.spawn_critical("server", until_stopped(&group));
        group.spawn("wedged", std::future::pending());
        shutdown.cancel();
        let started = tokio::time::Instant::now();
        group
            .wait()
            .await
            .expect("the wedged task is aborted, not a failure");
        assert_eq!(started.elapsed(), Duration::from_secs(3));
        assert!(group.running().is_empty());

        // `stop` stops at once and drains within its own bound.
        let (group, _health, _shutdown) = new_group();
        group.spawn("wedged", std::future::pending());
        let started = tokio::time::Instant::now();
        group
            .stop(Duration::from_millis(100))
            .await
            .expect("no failure");
        assert_eq!(started.elapsed(), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn dropping_the_group_aborts_its_tasks() {
        let (group, health, _shutdown) = new_group();
        let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
        group.spawn_critical("engine", async move {
            let _dropped = dropped_tx;
            std::future::pending::<Result<(), Oops>>().await
        });
        let token = group.token().clone();
        let clone = group.clone();
        drop(group);
        assert!(!token.is_cancelled(), "a clone still owns the group");
        drop(clone);
        assert!(token.is_cancelled());
        // The task's future was dropped: its sender with it.
        assert!(dropped_rx.await.is_err());
        assert!(health.notes().is_empty(), "an abort by drop is no failure");
    }

    #[tokio::test]
    async fn tracked_tasks_do_not_stop_the_group() {
        let (group, health, shutdown) = new_group();
        group.spawn("one reset", async {});
        group.spawn("a panicking reset", async { panic!("boom") });
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!group.is_stopping());
        assert!(health.is_ready());
        shutdown.cancel();
        group.wait().await.expect("no failure");
    }

    #[tokio::test(start_paused = true)]
    async fn periodic_tasks_run_and_report_errors() {
        let (group, health, shutdown) = new_group();
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let activator = group.spawn_periodic("sweep", Duration::from_secs(10), move || {
            let n = counted.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 1 {
                    Err(Oops("the API server is away"))
                } else {
                    Ok(())
                }
            }
        });
        let status = |group: &TaskGroup<Oops>| group.periodic_status().remove(0);
        assert_eq!(status(&group).runs, 0, "the first run is one period away");

        tokio::time::sleep(Duration::from_millis(10_001)).await;
        assert_eq!(status(&group).runs, 1);
        assert_eq!(status(&group).last_error, None);

        // Activated: runs at once, and this run fails.
        activator.activate();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let s = status(&group);
        assert_eq!((s.runs, s.failures), (2, 1));
        assert_eq!(s.last_error.as_deref(), Some("the API server is away"));
        assert_eq!(s.name, "sweep");
        assert!(health.is_ready(), "a failed run does not stop the group");

        // The next run succeeds and clears the error.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let s = status(&group);
        assert_eq!((s.runs, s.failures), (3, 1));
        assert_eq!(s.last_error, None);

        shutdown.cancel();
        group.wait().await.expect("no failure");
        assert_eq!(calls.load(Ordering::SeqCst), 3, "no run after the stop");
    }
}
