//! Deletion: finalizers and deletionTimestamp, namespace termination, owner-reference garbage
//! collection, and removal of a CRD's objects with the CRD.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api::{Propagation, now};
use crate::store::{Gr, ObjKey, State, meta_str};

/// The result of a delete.
#[derive(Debug)]
pub enum Outcome {
    /// Finalizers (or a namespace's contents) keep the object; it now has a deletionTimestamp.
    Pending(Arc<Value>),
    /// The object is gone.
    Deleted,
    /// There was no such object.
    Missing,
}

fn ns_gr() -> Gr {
    (String::new(), "namespaces".into())
}

fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn set_owner_refs(obj: &mut Value, refs: Vec<Value>) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if refs.is_empty() {
            m.remove("ownerReferences");
        } else {
            m.insert("ownerReferences".into(), Value::Array(refs));
        }
    }
}

fn without_owner(refs: Vec<Value>, uid: &str) -> Vec<Value> {
    refs.into_iter()
        .filter(|r| r.get("uid").and_then(Value::as_str) != Some(uid))
        .collect()
}

/// Deletes an object: sets deletionTimestamp while finalizers remain, removes it otherwise, and
/// handles dependents according to the propagation policy.
pub fn delete(st: &mut State, gr: &Gr, key: &ObjKey, policy: Propagation) -> Outcome {
    let Some(cur) = st.get(gr, key) else {
        return Outcome::Missing;
    };
    let uid = meta_str(&cur, "uid").unwrap_or_default().to_string();
    match policy {
        Propagation::Orphan => {
            for (dgr, dkey) in st.dependents_of(&uid) {
                if let Some(dep) = st.get(&dgr, &dkey) {
                    let mut d = (*dep).clone();
                    set_owner_refs(&mut d, without_owner(owner_refs(&dep), &uid));
                    st.put(&dgr, &dkey, d);
                }
            }
        }
        Propagation::Foreground => {
            for (dgr, dkey) in st.dependents_of(&uid) {
                delete(st, &dgr, &dkey, Propagation::Foreground);
            }
        }
        Propagation::Background => {}
    }
    let cur = match st.get(gr, key) {
        Some(c) => c,
        None => return Outcome::Deleted,
    };
    let is_ns = *gr == ns_gr();
    if is_ns {
        if cur.pointer("/metadata/deletionTimestamp").is_none() {
            let mut n = (*cur).clone();
            n["metadata"]["deletionTimestamp"] = json!(now());
            n["status"] = json!({"phase": "Terminating"});
            st.put(gr, key, n);
        }
        for (g, k) in st.keys_in_namespace(&key.1) {
            delete(st, &g, &k, Propagation::Background);
        }
        return if try_finalize_namespace(st, &key.1) {
            Outcome::Deleted
        } else {
            st.get(gr, key)
                .map(Outcome::Pending)
                .unwrap_or(Outcome::Deleted)
        };
    }
    if has_finalizers(&cur) {
        if cur.pointer("/metadata/deletionTimestamp").is_some() {
            return Outcome::Pending(cur);
        }
        let mut n = (*cur).clone();
        n["metadata"]["deletionTimestamp"] = json!(now());
        n["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        return Outcome::Pending(st.put(gr, key, n));
    }
    finalize(st, gr, key);
    Outcome::Deleted
}

/// Called after an update left an object with a deletionTimestamp and no finalizers.
pub fn after_update(st: &mut State, gr: &Gr, key: &ObjKey) {
    if *gr == ns_gr() {
        try_finalize_namespace(st, &key.1);
    } else {
        finalize(st, gr, key);
    }
}

/// Removes an object now and collects what depended on it.
pub fn finalize(st: &mut State, gr: &Gr, key: &ObjKey) {
    let Some(gone) = st.remove(gr, key) else {
        return;
    };
    let uid = meta_str(&gone, "uid").unwrap_or_default().to_string();
    for (dgr, dkey) in st.dependents_of(&uid) {
        let Some(dep) = st.get(&dgr, &dkey) else {
            continue;
        };
        let remaining = without_owner(owner_refs(&dep), &uid);
        if remaining.is_empty() {
            delete(st, &dgr, &dkey, Propagation::Background);
        } else {
            let mut d = (*dep).clone();
            set_owner_refs(&mut d, remaining);
            st.put(&dgr, &dkey, d);
        }
    }
    if gr.0 == "apiextensions.k8s.io"
        && gr.1 == "customresourcedefinitions"
        && let Ok(rt) = crate::crd::parse(&gone)
    {
        let cgr: Gr = (rt.group.clone(), rt.plural.clone());
        for obj in st.list(&cgr, None) {
            let k = (
                meta_str(&obj, "namespace").unwrap_or_default().to_string(),
                meta_str(&obj, "name").unwrap_or_default().to_string(),
            );
            st.remove(&cgr, &k);
        }
        st.registry.remove(&rt.group, &rt.plural);
    }
    if !key.0.is_empty() {
        try_finalize_namespace(st, &key.0);
    }
}

fn try_finalize_namespace(st: &mut State, ns: &str) -> bool {
    let key: ObjKey = (String::new(), ns.to_string());
    let Some(n) = st.get(&ns_gr(), &key) else {
        return false;
    };
    if n.pointer("/metadata/deletionTimestamp").is_none()
        || has_finalizers(&n)
        || st.count_in_namespace(ns) > 0
    {
        return false;
    }
    st.remove(&ns_gr(), &key);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::broadcast;

    fn cm() -> Gr {
        (String::new(), "configmaps".into())
    }

    fn state() -> State {
        let (tx, _) = broadcast::channel(64);
        let mut st = State::new(100, tx, false);
        st.put(
            &ns_gr(),
            &(String::new(), "ns".into()),
            json!({"metadata": {"name": "ns", "uid": "ns-uid"}}),
        );
        st
    }

    #[test]
    fn finalizers_keep_objects() {
        let mut st = state();
        let k = ("ns".to_string(), "a".to_string());
        st.put(
            &cm(),
            &k,
            json!({"metadata": {"name": "a", "namespace": "ns", "uid": "a", "finalizers": ["x"]}}),
        );
        let Outcome::Pending(obj) = delete(&mut st, &cm(), &k, Propagation::Background) else {
            panic!("pending expected")
        };
        assert!(obj.pointer("/metadata/deletionTimestamp").is_some());
        assert!(st.get(&cm(), &k).is_some());
    }

    #[test]
    fn background_gc_and_orphan() {
        let mut st = state();
        let owner = ("ns".to_string(), "owner".to_string());
        st.put(
            &cm(),
            &owner,
            json!({"metadata": {"name": "owner", "namespace": "ns", "uid": "o1"}}),
        );
        for (n, refs) in [
            ("only", json!([{"uid": "o1"}])),
            ("two", json!([{"uid": "o1"}, {"uid": "o2"}])),
        ] {
            st.put(&cm(), &("ns".into(), n.into()), json!({"metadata": {"name": n, "namespace": "ns", "uid": n, "ownerReferences": refs}}));
        }
        assert!(matches!(
            delete(&mut st, &cm(), &owner, Propagation::Background),
            Outcome::Deleted
        ));
        assert!(st.get(&cm(), &("ns".into(), "only".into())).is_none());
        let two = st.get(&cm(), &("ns".into(), "two".into())).unwrap();
        assert_eq!(owner_refs(&two), vec![json!({"uid": "o2"})]);

        st.put(
            &cm(),
            &owner,
            json!({"metadata": {"name": "owner", "namespace": "ns", "uid": "o3"}}),
        );
        st.put(&cm(), &("ns".into(), "kept".into()), json!({"metadata": {"name": "kept", "namespace": "ns", "uid": "k", "ownerReferences": [{"uid": "o3"}]}}));
        delete(&mut st, &cm(), &owner, Propagation::Orphan);
        let kept = st.get(&cm(), &("ns".into(), "kept".into())).unwrap();
        assert!(owner_refs(&kept).is_empty());
    }

    #[test]
    fn namespace_termination_waits_for_finalizers() {
        let mut st = state();
        let k = ("ns".to_string(), "a".to_string());
        st.put(
            &cm(),
            &k,
            json!({"metadata": {"name": "a", "namespace": "ns", "uid": "a", "finalizers": ["x"]}}),
        );
        st.put(
            &cm(),
            &("ns".into(), "b".into()),
            json!({"metadata": {"name": "b", "namespace": "ns", "uid": "b"}}),
        );
        let nk = (String::new(), "ns".to_string());
        assert!(matches!(
            delete(&mut st, &ns_gr(), &nk, Propagation::Background),
            Outcome::Pending(_)
        ));
        assert_eq!(st.count_in_namespace("ns"), 1);
        let mut a = (*st.get(&cm(), &k).unwrap()).clone();
        a["metadata"]["finalizers"] = json!([]);
        st.put(&cm(), &k, a);
        after_update(&mut st, &cm(), &k);
        assert!(st.get(&ns_gr(), &nk).is_none());
    }
}
