//! The small pure helpers of query and path input: empty means absent, names are Kubernetes
//! names, lists are cut to a page.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::error::PageError;

/// The trimmed value, `None` when absent or blank.
pub(super) fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().map(str::trim).filter(|s| !s.is_empty())
}

/// The namespaces of `objs`.
pub(super) fn namespaces_of<'a, K: kube::Resource + 'a>(
    objs: impl Iterator<Item = &'a Arc<K>>,
) -> BTreeSet<String> {
    objs.filter_map(|o| o.meta().namespace.clone()).collect()
}

/// Cuts `items` to the first `max`; how many were left out.
pub fn paginate<T>(items: &mut Vec<T>, max: usize) -> usize {
    let more = items.len().saturating_sub(max);
    items.truncate(max);
    more
}

/// Checks a name from a path: a Kubernetes object name (DNS subdomain).
pub(super) fn object_name(what: &str, s: &str) -> Result<(), PageError> {
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(PageError::BadRequest(format!(
            "{what} {s:?} is not a Kubernetes name (lower-case letters, digits, `-` and `.`)"
        )))
    }
}

/// The namespace and name of a `kind` object from a page's path (both as [`object_name`]
/// checks them, the namespace first).
pub(super) fn object_path(kind: &str, ns: &str, name: &str) -> Result<(), PageError> {
    object_name("namespace", ns)?;
    object_name(kind, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paginate_keeps_the_first_and_counts_the_rest() {
        let mut v: Vec<u32> = (0..10).collect();
        assert_eq!(paginate(&mut v, 4), 6);
        assert_eq!(v, [0, 1, 2, 3]);
        assert_eq!(paginate(&mut v, 4), 0);
        assert_eq!(paginate(&mut v, 10), 0);
        assert_eq!(v.len(), 4);
    }

    #[test]
    fn names_from_paths_are_checked() {
        assert!(object_name("workflow", "wf-1.a").is_ok());
        assert!(object_name("workflow", "WF").is_err());
        assert!(object_name("workflow", "a/b").is_err());
        assert!(object_name("workflow", "").is_err());
    }
}
