//! Cases ported from the upstream test tables for behaviour this engine once got wrong: Sprig
//! v3.3.0 (`crypto_test.go` TestSha512Sum, `strings_test.go`/`functions_test.go` TestCamelCase,
//! `list_test.go` TestInitial/TestRest and their `must` forms) and Go's `text/template`
//! (`exec_test.go` number literals, `TestMissingMapKey` with nil data, the slicing rows, the
//! field on a parenthesized interface). Expected outputs are the upstream ones, except where a
//! row's comment says why Tinkerbell's function map gives another answer.

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

/// The data of Go's slicing rows (`tVal` in exec_test.go), as JSON: JSON has slices only, no
/// arrays and no capacity beyond the length.
fn slicing_data() -> J {
    json!({"SI": [3, 4, 5], "S": "xyz", "Empty3": [7, 8]})
}

fn slice_err(call: &str, message: &str) -> String {
    format!("ERR template: t:1:2: executing \"t\" at <{call}>: error calling slice: {message}")
}

const OUT_OF_BOUNDS: &str = "reflect.Value.Slice: slice index out of bounds";
const NOT_A_LIST: &str = "list should be type of slice or array but string";

#[test]
fn go_slicing_rows_that_sprig_answers_alike() {
    // exec_test.go, "Slicing". Tinkerbell renders with `template.New(..).Funcs(sprig..)`, and a
    // function given to a Go template replaces the built-in of that name, so a Tinkerbell
    // template's `slice` is Sprig's (list.go `slice`/`mustSlice`: `reflect.Value.Slice(start,
    // end)`), not Go's built-in. These rows get the same answer from both: the result, or an
    // error (here with Sprig's text, the panic of `reflect.Value.Slice`).
    let data = slicing_data();
    let cases: Vec<(&str, String)> = vec![
        ("{{slice .SI}}", "[3 4 5]".into()),
        ("{{slice .SI 1}}", "[4 5]".into()),
        ("{{slice .SI 1 2}}", "[4]".into()),
        ("{{slice .SI -1}}", slice_err("slice .SI -1", OUT_OF_BOUNDS)),
        (
            "{{slice .SI 1 -2}}",
            slice_err("slice .SI 1 -2", OUT_OF_BOUNDS),
        ),
        (
            "{{slice .SI 2 1}}",
            slice_err("slice .SI 2 1", OUT_OF_BOUNDS),
        ),
        (
            "{{slice .SI 4 5}}",
            slice_err("slice .SI 4 5", OUT_OF_BOUNDS),
        ),
        // A 3-index slice of a string and a slice past a string's end are errors in both (Go:
        // bad index; Sprig: a string is not a list).
        ("{{slice .S 1 5}}", slice_err("slice .S 1 5", NOT_A_LIST)),
        (
            "{{slice .S 1 2 2}}",
            slice_err("slice .S 1 2 2", NOT_A_LIST),
        ),
        ("{{slice .Empty3 0 1}}", "[7]".into()),
    ];
    let cases: Vec<(&str, &str)> = cases.iter().map(|(s, w)| (*s, w.as_str())).collect();
    table(&cases, &data);
    // "slice of an untyped nil": an error in both (the messages differ: Sprig's
    // `reflect.TypeOf(nil).Kind()` is a nil-pointer panic).
    assert!(run("{{slice nil}}", &data, &RenderOptions::default()).is_err());
}

#[test]
fn go_slicing_rows_where_sprig_differs() {
    // exec_test.go, "Slicing": the rows whose answer from Go's built-in `slice` is not what a
    // Tinkerbell template gets, since Sprig's `slice` replaces it (see above). Each expected
    // value is Sprig's; Go's built-in answer is in the comment.
    let data = slicing_data();
    let cases: Vec<(&str, String)> = vec![
        // Go: errors (a third index below the second, or past the capacity). Sprig reads two
        // indices and ignores the rest.
        ("{{slice .SI 1 2 -1}}", "[4]".into()),
        ("{{slice .SI 2 2 1}}", "[]".into()),
        ("{{slice .SI 2 2 5}}", "[]".into()),
        // Go: `xyz`, `x`, `yz`, `y` (its built-in slices strings). Sprig refuses anything but a
        // list.
        ("{{slice .S}}", slice_err("slice .S", NOT_A_LIST)),
        ("{{slice .S 0 1}}", slice_err("slice .S 0 1", NOT_A_LIST)),
        ("{{slice .S 1}}", slice_err("slice .S 1", NOT_A_LIST)),
        ("{{slice .S 1 2}}", slice_err("slice .S 1 2", NOT_A_LIST)),
    ];
    let cases: Vec<(&str, &str)> = cases.iter().map(|(s, w)| (*s, w.as_str())).collect();
    table(&cases, &data);
    // Not ported: the `.SICap` rows (a slice whose capacity exceeds its length; JSON data has
    // none) and the `.AI` rows (a Go array; JSON has slices only, and the `.SI` rows above
    // cover the same indices).
}

#[test]
fn go_field_on_parenthesized_interface() {
    // exec_test.go: "field on interface" and "field on parenthesized interface", both with nil
    // data: `(.)` evaluates to the same invalid value as `.`, so a field of it is `<no value>`
    // (and, with missingkey=error, the nil-data error, as for `.foo`).
    let default = RenderOptions::default();
    assert_eq!(
        run("{{.foo}}", &J::Null, &default).as_deref(),
        Ok("<no value>")
    );
    assert_eq!(
        run("{{(.).foo}}", &J::Null, &default).as_deref(),
        Ok("<no value>")
    );
    assert_eq!(
        run("{{($).foo}}", &J::Null, &default).as_deref(),
        Ok("<no value>")
    );
    let err = run("{{(.).foo}}", &J::Null, &RenderOptions::tinkerbell()).unwrap_err();
    assert!(
        err.contains("nil data; no entry for key \"foo\""),
        "unexpected error: {err}"
    );
    // With data, a parenthesized dot is the dot.
    assert_eq!(
        run("{{(.).foo}}", &json!({"foo": 7}), &default).as_deref(),
        Ok("7")
    );
}
