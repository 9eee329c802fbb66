//! Why a reconcile failed (it is retried with back-off; what the BMC said is never an error
//! here: it goes into the object's conditions).

/// A reconcile that could not finish.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API refused or failed a read or write.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object without a namespace or name (the API server always sets them).
    #[error("{0} has no namespace or name")]
    Unnamed(&'static str),
}
