//! Fuzzing and resource guards: arbitrary sources and data never panic and never exceed the
//! output cap; deep nesting and recursion end in errors, never in a stack overflow.

use proptest::prelude::*;
use serde_json::json;
use tink_template::{RenderError, RenderOptions, Template};

const PIECES: &[&str] = &[
    "{{",
    "}}",
    "{{-",
    " -}}",
    " ",
    "\n",
    ".",
    ".a",
    ".b",
    ".l",
    ".m",
    "$",
    "$x",
    "$y",
    ":=",
    "=",
    "|",
    "(",
    ")",
    ",",
    "if",
    "else",
    "end",
    "range",
    "with",
    "define",
    "template",
    "block",
    "break",
    "continue",
    "nil",
    "true",
    "\"t\"",
    "\"s\"",
    "`r`",
    "'c'",
    "0",
    "1",
    "-1",
    "2.5",
    "1e3",
    "len",
    "index",
    "printf",
    "\"%v %d %s\"",
    "print",
    "and",
    "or",
    "not",
    "eq",
    "lt",
    "slice",
    "add",
    "repeat",
    "until",
    "toYaml",
    "fromYaml",
    "toJson",
    "dict",
    "list",
    "set",
    "append",
    "default",
    "formatPartition",
    "netmaskToPrefixLength",
    "regexFind",
    "\"a+\"",
    "join",
    "indent",
    "abbrev",
    "seq",
    "/*",
    "*/",
    "x",
    "{{/* c */}}",
    "{{ .a }}",
    "{{range .l}}",
    "{{end}}",
    "{{template \"t\" .}}",
    "{{define \"t\"}}",
    "{{ $x := .m }}",
];

fn source() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|v| v.concat())
}

fn data() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(json!(null)),
        any::<bool>().prop_map(|b| json!(b)),
        any::<i64>().prop_map(|i| json!(i)),
        (-1e9f64..1e9).prop_map(|f| json!(f)),
        "[a-z/ 0-9.%{}]{0,12}".prop_map(|s| json!(s)),
    ];
    let value = leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map("[a-c]", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    (value.clone(), value.clone(), value)
        .prop_map(|(a, b, l)| json!({"a": a, "b": b, "l": l, "m": {"a": 1, "b": [1, 2]}}))
}

fn small_opts(missing_error: bool) -> RenderOptions {
    RenderOptions {
        max_output_bytes: 4096,
        max_steps: 20_000,
        missing_key: if missing_error {
            tink_template::MissingKey::Error
        } else {
            tink_template::MissingKey::Default
        },
        ..RenderOptions::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn token_soup_never_panics_and_respects_the_cap(src in source(), d in data(), missing_error in any::<bool>()) {
        let opts = small_opts(missing_error);
        if let Ok(t) = Template::parse("fuzz", &src) {
            match t.render(&d, &opts) {
                Ok(out) => prop_assert!(out.len() <= opts.max_output_bytes),
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
        }
    }

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,80}", d in data()) {
        if let Ok(t) = Template::parse("fuzz", &src) {
            let _ = t.render(&d, &small_opts(false));
        }
    }

    #[test]
    fn text_without_actions_renders_verbatim(text in "[^{}]{0,200}") {
        let t = Template::parse("plain", &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(t.render(&json!({}), &RenderOptions::default()).ok(), Some(text));
    }
}

#[test]
fn deeply_nested_parentheses_are_a_parse_error() {
    let src = format!("{{{{ {}1{} }}}}", "(".repeat(5000), ")".repeat(5000));
    let err = Template::parse("deep", &src)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("max nesting depth 100 exceeded"), "{err}");
    let ok = format!("{{{{ {}1{} }}}}", "(".repeat(50), ")".repeat(50));
    assert!(Template::parse("ok", &ok).is_ok());
}

#[test]
fn deeply_nested_control_structures_are_a_parse_error() {
    let src = format!("{}x{}", "{{if 1}}".repeat(5000), "{{end}}".repeat(5000));
    let err = Template::parse("deep", &src)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("max nesting depth 100 exceeded"), "{err}");
}

#[test]
fn unbounded_template_recursion_is_an_error() {
    let t = Template::parse(
        "r",
        "{{define \"loop\"}}{{template \"loop\" .}}{{end}}{{template \"loop\" .}}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = t.render(&json!({}), &RenderOptions::default()).err();
    assert!(
        matches!(&err, Some(RenderError::Exec { message, .. }) if message == "exceeded maximum template depth (100)"),
        "{err:?}"
    );
}

fn render_on_small_stack(src: String) -> String {
    let t = Template::parse("nest", &src).unwrap_or_else(|e| panic!("{e}"));
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            t.render(&json!({"l": [1], "m": {"a": 1}}), &RenderOptions::default())
                .err()
                .map(|e| e.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    handle
        .join()
        .unwrap_or_else(|_| panic!("render thread panicked"))
        .unwrap_or_default()
}

#[test]
fn worst_case_nesting_fits_a_small_thread_stack() {
    // The deepest recursion the limits allow (nested control structures and parenthesised
    // pipelines in every template, template calls 100 deep) must end in an error on a 2 MiB
    // stack (tokio's worker threads and the test harness use that size), never overflow it.
    for (open, close) in [
        ("{{if 1}}", "{{end}}"),
        ("{{range (list 1)}}", "{{end}}"),
        ("{{with (dict \"a\" 1)}}", "{{end}}"),
        ("{{if (and (or 1) (not 0))}}", "{{end}}"),
    ] {
        let n = 80;
        let body = format!(
            "{}{{{{template \"d\" (((((((((((.)))))))))))}}}}{}",
            open.repeat(n),
            close.repeat(n)
        );
        let src = format!("{{{{define \"d\"}}}}{body}{{{{end}}}}{{{{template \"d\" .}}}}");
        let err = render_on_small_stack(src);
        assert!(
            err.contains("exceeded maximum nesting depth (500)"),
            "{err}"
        );
    }
    // template recursion alone stops at the template depth limit
    let err = render_on_small_stack(
        "{{define \"d\"}}{{template \"d\" .}}{{end}}{{template \"d\" .}}".to_string(),
    );
    assert!(
        err.contains("exceeded maximum template depth (100)"),
        "{err}"
    );
}

#[test]
fn deeply_nested_data_is_refused() {
    let mut v = json!(1);
    for _ in 0..300 {
        v = json!([v]);
    }
    // serde_json's own recursion limit is 128 for parsing; values built in code can be deeper.
    let t = Template::parse("d", "{{.}}").unwrap_or_else(|e| panic!("{e}"));
    let err = t.render(&json!({"x": v}), &RenderOptions::default()).err();
    assert!(
        matches!(err, Some(RenderError::DataTooDeep { .. })),
        "{err:?}"
    );
}

#[test]
fn self_referencing_dicts_are_refused() {
    let t = Template::parse("c", "{{ $d := dict }}{{ $_ := set $d \"self\" $d }}")
        .unwrap_or_else(|e| panic!("{e}"));
    let err = t
        .render(&json!({}), &RenderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("cannot store a dict inside itself"), "{err}");
}

#[test]
fn doubling_a_string_hits_the_cap_not_the_memory() {
    let t = Template::parse(
        "grow",
        "{{ $s := \"ab\" }}{{ range 64 }}{{ $s = cat $s $s }}{{ end }}{{ len $s }}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = t
        .render(&json!({}), &RenderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("result exceeds 262144 bytes"), "{err}");
}

#[test]
fn output_cap_error_is_clear() {
    let t = Template::parse("big", "{{ range 100000 }}0123456789{{ end }}")
        .unwrap_or_else(|e| panic!("{e}"));
    let err = t.render(&json!({}), &RenderOptions::default()).err();
    assert_eq!(
        err.map(|e| e.to_string()).as_deref(),
        Some("template: big: rendered output exceeds 262144 bytes")
    );
}

#[test]
fn values_built_in_loops_stay_bounded() {
    // nesting grows one level per iteration: refused at the value depth limit, not by overflow
    let t = Template::parse(
        "deep",
        "{{ $x := list }}{{ range 100000 }}{{ $x = list $x }}{{ end }}{{ $x }}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = t
        .render(&json!({}), &RenderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("result nested deeper than 200 levels"),
        "{err}"
    );
    // sharing doubles the printed size each iteration: refused at the size limit, quickly
    let t = Template::parse(
        "dag",
        "{{ $x := list 1 }}{{ range 100 }}{{ $x = list $x $x }}{{ end }}{{ $x }}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = t
        .render(&json!({}), &RenderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("result exceeds 262144 bytes"), "{err}");
    let t = Template::parse(
        "dict",
        "{{ $d := dict }}{{ range 100000 }}{{ $d = dict \"x\" $d }}{{ end }}",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = t
        .render(&json!({}), &RenderOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("result nested deeper than 200 levels"),
        "{err}"
    );
}
