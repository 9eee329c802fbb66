//! The BMC reconcilers for Rufio's `bmc.tinkerbell.org` kinds. This is the start: the pure
//! planning of a Job ([`job::next_step`], [`job::runnable`]); the IO around it comes next.
//!
//! The intended shape (the item 3), following the codebases STYLE.md names:
//! - one Job at a time per Machine ([`job::runnable`]: the oldest unfinished Job of each
//!   Machine runs, the others wait), its tasks in order, each a child Task named
//!   `<job>-task-<n>` as Rufio names them, so a controller restarted mid-Job finds the Tasks it
//!   already created and never creates (or runs) one twice;
//! - a thin reconcile per kind that reads (Job, Machine, its Tasks), calls the pure planner,
//!   and applies the one step it returns, as kube-rs/controller-rs does;
//! - the Task reconciler as the only caller of `tink_bmc` providers, where a power task
//!   completes only when the BMC reports the target state;
//! - power polling as a periodic background task with jitter, driven, tracked and reported in
//!   one place as omicron's background-task driver does.
#![forbid(unsafe_code)]

pub mod job;
