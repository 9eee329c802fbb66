//! Cases ported from the upstream test tables for behaviour this engine once got wrong: Sprig
//! v3.3.0 (`crypto_test.go` TestSha512Sum, `strings_test.go`/`functions_test.go` TestCamelCase,
//! `list_test.go` TestInitial/TestRest and their `must` forms) and Go's `text/template`
//! (`exec_test.go` number literals, `TestMissingMapKey` with nil data). Expected outputs are the
//! upstream ones.

use pretty_assertions::assert_eq;
use serde_json::{Value as J, json};
use tink_template::{MissingKey, RenderOptions, Template};

fn run(src: &str, data: &J, opts: &RenderOptions) -> Result<String, String> {
    let t = Template::parse("t", src).map_err(|e| e.to_string())?;
    t.render(data, opts).map_err(|e| e.to_string())
}

fn table(cases: &[(&str, &str)], data: &J) {
    let opts = RenderOptions::default();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(src, want)| {
            let got = run(src, data, &opts).unwrap_or_else(|e| format!("ERR {e}"));
            (got != *want).then(|| format!("{src:?}: want {want:?}, got {got:?}"))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sprig_sha512sum() {
    // crypto_test.go: TestSha512Sum.
    table(
        &[
            (
                r#"{{"abc" | sha512sum}}"#,
                "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f",
            ),
            (
                r#"{{sha512sum "123456789"}}"#,
                "d9e6762dd1c8eaf6d61b3c6192fc408d4d6d5f1176d0c29169bc24e71c3f274ad27fcd5811b313d681f7e55ec02d73d499c95455b6b5bb503acf574fba8ffe85",
            ),
        ],
        &json!({}),
    );
}

#[test]
fn sprig_camelcase() {
    // TestCamelCase (xstrings v1.5 ToPascalCase, which Sprig v3.3.0's camelcase calls).
    table(
        &[
            (r#"{{ camelcase "http_server" }}"#, "HttpServer"),
            (r#"{{ camelcase "_camel_case" }}"#, "_CamelCase"),
            (r#"{{ camelcase "no_https" }}"#, "NoHttps"),
            (r#"{{ camelcase "_complex__case_" }}"#, "_Complex_Case_"),
            (r#"{{ camelcase "all" }}"#, "All"),
            // xstrings' own samples.
            (r#"{{ camelcase "some_words" }}"#, "SomeWords"),
            (r#"{{ camelcase "some words" }}"#, "SomeWords"),
            (r#"{{ camelcase "GOLANG_IS_GREAT" }}"#, "GolangIsGreat"),
            (r#"{{ camelcase "a__b" }}"#, "A_B"),
            (r#"{{ camelcase "ab_" }}"#, "Ab_"),
            (r#"{{ camelcase "" }}"#, ""),
            (r#"{{ camelcase "__" }}"#, "__"),
        ],
        &json!({}),
    );
}

#[test]
fn sprig_initial_and_rest() {
    // list_test.go: TestInitial, TestMustInitial, TestRest, TestMustRest.
    table(
        &[
            (r#"{{ list 1 2 3 4 5 | initial }}"#, "[1 2 3 4]"),
            (r#"{{ initial .one }}"#, "[1 2 3]"),
            (r#"{{ initial .two }}"#, "[]"),
            (r#"{{ initial .three }}"#, "[]"),
            (r#"{{ mustInitial .one }}"#, "[1 2 3]"),
            (r#"{{ mustInitial .two }}"#, "[]"),
            (r#"{{ mustInitial .three }}"#, "[]"),
            (r#"{{ list 1 2 3 4 5 | rest }}"#, "[2 3 4 5]"),
            (r#"{{ rest .one }}"#, "[2 3 4]"),
            (r#"{{ rest .two }}"#, "[]"),
            (r#"{{ rest .three }}"#, "[]"),
            (r#"{{ mustRest .one }}"#, "[2 3 4]"),
            (r#"{{ mustRest .two }}"#, "[]"),
            (r#"{{ mustRest .three }}"#, "[]"),
            // first/last of an empty list stay nil (`<no value>`), as in Sprig.
            (r#"{{ first .three }}"#, "<no value>"),
            (r#"{{ last .three }}"#, "<no value>"),
        ],
        &json!({"one": [1, 2, 3, 4], "two": ["a"], "three": []}),
    );
}

#[test]
fn go_number_literals() {
    // exec_test.go: the number-literal rows of execTests.
    table(
        &[
            ("{{print 1234}}", "1234"),
            ("{{print 12_34}}", "1234"),
            ("{{print 0b101}}", "5"),
            ("{{print 0b_1_0_1}}", "5"),
            ("{{print 0B101}}", "5"),
            ("{{print 0377}}", "255"),
            ("{{print 0o377}}", "255"),
            ("{{print 0o_3_7_7}}", "255"),
            ("{{print 0O377}}", "255"),
            ("{{print 0x123}}", "291"),
            ("{{print 0x1_23}}", "291"),
            ("{{print 0X123ABC}}", "1194684"),
            ("{{print 123.4}}", "123.4"),
            ("{{print 0_0_1_2_3.4}}", "123.4"),
            ("{{print +0x1.ep+2}}", "7.5"),
            ("{{print +0x_1.e_0p+0_2}}", "7.5"),
            ("{{print +0X1.EP+2}}", "7.5"),
            ("{{print 1_2_3_4 7.5_00_00_00}}", "1234 7.5"),
            ("{{print 1234 0x0_1.e_0p+02}}", "1234 7.5"),
            ("{{print 0x1p-2}}", "0.25"),
        ],
        &json!({}),
    );
}

#[test]
fn go_number_literal_errors() {
    // parse_test.go: numbers that must not parse.
    for src in [
        "{{print 1__2}}",
        "{{print _12}}",
        "{{print 12_}}",
        "{{print 0x_}}",
        "{{print 0x1.e}}",
        "{{print 0b102}}",
    ] {
        assert!(
            Template::parse("t", src).is_err()
                || run(src, &json!({}), &RenderOptions::default()).is_err(),
            "{src} should not parse"
        );
    }
}

#[test]
fn go_missing_key_with_nil_data() {
    // exec_test.go TestMissingMapKey: nil data is the invalid value, so a field of it is
    // `<no value>` by default and an error only with missingkey=error.
    let src = "{{.x}} {{.y}}";
    let default = RenderOptions::default();
    assert_eq!(
        run(src, &J::Null, &default).as_deref(),
        Ok("<no value> <no value>")
    );
    assert_eq!(
        run("{{.}}", &J::Null, &default).as_deref(),
        Ok("<no value>")
    );
    let zero = RenderOptions {
        missing_key: MissingKey::Zero,
        ..RenderOptions::default()
    };
    assert_eq!(
        run(src, &J::Null, &zero).as_deref(),
        Ok("<no value> <no value>")
    );
    let err = run(src, &J::Null, &RenderOptions::tinkerbell()).unwrap_err();
    assert!(
        err.contains("nil data; no entry for key \"x\""),
        "unexpected error: {err}"
    );
    // With a map, missing keys behave as before.
    assert_eq!(
        run(src, &json!({"x": 99}), &default).as_deref(),
        Ok("99 <no value>")
    );
}
