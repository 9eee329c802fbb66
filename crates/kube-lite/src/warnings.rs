//! Warnings for the API client, sent as `Warning: 299 - "<text>"` response headers, as
//! kube-apiserver does (KEP-1693): kubectl prints each as `Warning: <text>` on stderr.
//!
//! Each request runs inside [`collect`], which gives it a per-request recorder (a task-local);
//! admission webhooks add their `response.warnings` with [`add`], on allowed and denied
//! requests alike. As in kube-apiserver's recorder: empty texts are dropped, duplicates are
//! written once, and at most [`MAX_TOTAL`] characters of warnings are written; when they are
//! more, each is cut to [`MAX_ITEM`] characters, and those that still do not fit are dropped
//! (in the order they were added).

use std::cell::RefCell;
use std::future::Future;

use http::{HeaderMap, HeaderValue, header};

/// The most characters of warning text written for one request.
pub(crate) const MAX_TOTAL: usize = 4 * 1024;
/// The length each warning is cut to when they are more than [`MAX_TOTAL`] together.
pub(crate) const MAX_ITEM: usize = 256;

tokio::task_local! {
    static RECORDER: RefCell<Vec<String>>;
}

/// Records a warning for the current request (ignored outside [`collect`]).
pub(crate) fn add(text: &str) {
    if text.is_empty() {
        return;
    }
    let _ = RECORDER.try_with(|r| {
        let mut r = r.borrow_mut();
        if !r.iter().any(|w| w == text) {
            r.push(text.to_string());
        }
    });
}

/// Runs `f` with a fresh recorder; returns its output and the warnings it recorded.
pub(crate) async fn collect<T>(f: impl Future<Output = T>) -> (T, Vec<String>) {
    RECORDER
        .scope(RefCell::new(Vec::new()), async {
            let out = f.await;
            let warnings = RECORDER.with(|r| std::mem::take(&mut *r.borrow_mut()));
            (out, warnings)
        })
        .await
}

/// The warnings to write, within the size limits.
fn limited(warnings: &[String]) -> Vec<String> {
    let total: usize = warnings.iter().map(|w| w.chars().count()).sum();
    let cut: Vec<String> = if total > MAX_TOTAL {
        warnings
            .iter()
            .map(|w| w.chars().take(MAX_ITEM).collect())
            .collect()
    } else {
        warnings.to_vec()
    };
    let mut used = 0;
    let mut out = Vec::new();
    for w in cut {
        let n = w.chars().count();
        if used + n > MAX_TOTAL {
            break;
        }
        used += n;
        out.push(w);
    }
    out
}

/// `299 - "<text>"`: `"` and `\` escaped, control characters (not allowed in a header) as
/// spaces.
pub(crate) fn header_value(text: &str) -> Option<HeaderValue> {
    let mut v = String::with_capacity(text.len() + 8);
    v.push_str("299 - \"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                v.push('\\');
                v.push(c);
            }
            c if c.is_control() => v.push(' '),
            c => v.push(c),
        }
    }
    v.push('"');
    HeaderValue::from_bytes(v.as_bytes()).ok()
}

/// Appends one `Warning` header per warning.
pub(crate) fn write(headers: &mut HeaderMap, warnings: &[String]) {
    for w in limited(warnings) {
        if let Some(v) = header_value(&w) {
            headers.append(header::WARNING, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_per_request_and_dedupes() {
        let ((), w) = collect(async {
            add("a: first");
            add("");
            add("b: second");
            add("a: first");
        })
        .await;
        assert_eq!(w, vec!["a: first", "b: second"]);
        // Outside a request: ignored, no panic.
        add("nowhere");
        let ((), w) = collect(async {}).await;
        assert!(w.is_empty());
    }

    #[test]
    fn headers_are_quoted_as_kube_apiserver_quotes_them() {
        let mut h = HeaderMap::new();
        write(
            &mut h,
            &[
                "spec.x: \"quoted\" \\ back".to_string(),
                "line\nbreak, café".to_string(),
            ],
        );
        let got: Vec<&[u8]> = h
            .get_all(header::WARNING)
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(
            got,
            vec![
                br#"299 - "spec.x: \"quoted\" \\ back""#.as_slice(),
                "299 - \"line break, café\"".as_bytes(),
            ]
        );
    }

    #[test]
    fn too_many_warnings_are_cut_then_dropped() {
        let small: Vec<String> = (0..3).map(|i| format!("w{i}")).collect();
        assert_eq!(limited(&small), small);
        let long: Vec<String> = (0..40)
            .map(|i| format!("{i:03}{}", "x".repeat(400)))
            .collect();
        let out = limited(&long);
        assert!(out.iter().all(|w| w.chars().count() == MAX_ITEM));
        assert_eq!(out.len(), MAX_TOTAL / MAX_ITEM);
        assert!(out[0].starts_with("000") && out[15].starts_with("015"));
    }
}
