//! A leadership term's tasks: one [`TaskGroup`] per term (the runtime's, as every service
//! uses), owned by [`crate::engine::lead`].
//!
//! The term's long-running parts (the reconciler, the events consumer, the presence watch, the
//! sweeps, ...) are its critical tasks: one that ends before the term stops fails the term (and
//! with it the replica). The short per-object work its components start (one Hardware's session
//! reset, one machine's agent secret, admitting a Hardware's agent ids, the events backlog
//! watch) are tracked tasks, started through a [`Spawner`]: drained with the term, and aborted
//! with it when the term is dropped.
//!
//! The term itself is not a task of a group: `run_elected` (crates/lease) runs it, and a term
//! that ends because leadership was lost is no failure of the replica.

use std::future::Future;
use std::sync::{Arc, Weak};

use tink_runtime::{TaskFailure, TaskGroup};
use tracing::debug;

use crate::error::Error;

/// The task group of one term.
pub(crate) type Tasks = TaskGroup<Error>;

/// Starts tracked tasks in a term's group without keeping the group alive.
///
/// The components that start per-object work are held by the term's own critical tasks (the
/// reconciler's Hardware watch holds the agent resets, secrets and admissions). A group handle
/// there would keep the group alive from inside its own tasks, so a dropped term (a killed
/// replica, a term aborted after its drain budget) would leave them running. The spawner holds
/// the group weakly: once the term's owner has dropped it, or while it is stopping, nothing new
/// starts (each kind of work is retried by the next term's sweep or watch).
#[derive(Clone, Debug)]
pub(crate) struct Spawner(Weak<Tasks>);

impl Spawner {
    /// A spawner into `group`.
    pub fn new(group: &Arc<Tasks>) -> Self {
        Self(Arc::downgrade(group))
    }

    /// Starts `task` as a tracked task of the term named `name`, unless the term is stopping
    /// or gone (then `task` is dropped unstarted).
    pub fn spawn<F>(&self, name: impl Into<String>, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        match self.0.upgrade() {
            Some(group) if !group.is_stopping() => group.spawn(name, task),
            _ => debug!(task = %name, "the term is stopping; not started"),
        }
    }
}

/// The replica's error for the critical task that stopped the term.
pub(crate) fn stopped(failure: TaskFailure<Error>) -> Error {
    match failure {
        TaskFailure::Failed { error, .. } => error,
        TaskFailure::Ended { task } => Error::Stopped(task),
        TaskFailure::Panicked { task, message } => Error::Panicked(task, message),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tink_runtime::Health;
    use tokio_util::sync::CancellationToken;

    use super::*;

    fn new_group() -> Arc<Tasks> {
        Arc::new(TaskGroup::new(Health::new(), &CancellationToken::new()))
    }

    #[tokio::test]
    async fn a_task_holding_a_spawner_does_not_keep_a_dropped_term_running() {
        let group = new_group();
        let spawner = Spawner::new(&group);
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (done_tx, mut done_rx) = tokio::sync::oneshot::channel::<()>();
        // A critical task that holds the spawner (as the reconciler holds the components).
        group.spawn_critical("reconciler", {
            let spawner = spawner.clone();
            async move {
                spawner.spawn("reset", async move {
                    let _ = started_tx.send(());
                    std::future::pending::<()>().await;
                    drop(done_tx);
                });
                std::future::pending::<Result<(), Error>>().await
            }
        });
        started_rx.await.expect("the tracked task started");
        drop(group);
        // Aborted with the group: its sender is dropped without being sent.
        tokio::time::timeout(Duration::from_secs(5), &mut done_rx)
            .await
            .expect("the tracked task was aborted with its dropped term")
            .expect_err("aborted, never finished");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawner.spawn("late", async move {
            let _ = tx.send(());
        });
        rx.await
            .expect_err("a spawner of a dropped term starts nothing");
    }

    #[tokio::test]
    async fn a_stopping_term_starts_no_new_work_and_early_ends_are_named() {
        let group = new_group();
        let spawner = Spawner::new(&group);
        group.spawn_critical("presence watch", async { Ok(()) });
        let failure = group.wait().await.expect_err("an early end fails the term");
        assert_eq!(
            stopped(failure).to_string(),
            "the presence watch stopped unexpectedly"
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        spawner.spawn("late", async move {
            let _ = tx.send(());
        });
        rx.await.expect_err("nothing starts once the term stops");

        let group = new_group();
        group.spawn_critical("events consumer", async { panic!("boom") });
        let failure = group.wait().await.expect_err("a panic fails the term");
        assert_eq!(
            stopped(failure).to_string(),
            "the events consumer panicked: boom"
        );
    }
}
