//! The behaviour table: Go `text/template` semantics, the built-ins, Sprig's and Tinkerbell's
//! functions, and the error messages, each compared with what Go produces (derived from the Go
//! sources of text/template, fmt, strconv and Sprig v3).

use pretty_assertions::assert_eq;
use serde_json::{Value as J, json};
use tink_template::{MissingKey, RenderOptions, Template};

fn run(src: &str, data: &J, opts: &RenderOptions) -> Result<String, String> {
    let t = Template::parse("t", src).map_err(|e| e.to_string())?;
    t.render(data, opts).map_err(|e| e.to_string())
}

fn data() -> J {
    json!({
        "name": "tink",
        "n": 2,
        "zero": 0,
        "f": 1.5,
        "big": 1000000,
        "bigf": 1000000.0,
        "neg": -3,
        "t": true,
        "empty": "",
        "null": null,
        "l": ["a", "b"],
        "nums": [1, 2, 3, 4],
        "el": [],
        "m": {"b": 2, "a": 1},
        "em": {},
        "nested": {"x": [1, {"y": null}], "s": "str"},
        "objs": [{"name": "a"}, {"name": "b"}],
        "grid": [[1, 2], [3, 4]],
    })
}

/// (template, expected output or, when it starts with "ERR ", the expected error)
fn check(cases: &[(&str, &str)], opts: &RenderOptions) {
    let d = data();
    let mut failures = Vec::new();
    for (src, want) in cases {
        let got = run(src, &d, opts);
        let got_s = match &got {
            Ok(s) => s.clone(),
            Err(e) => format!("ERR {e}"),
        };
        if got_s != *want {
            failures.push(format!(
                "template {src:?}\n   want {want:?}\n    got {got_s:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn text_fields_and_printing() {
    check(
        &[
            ("hello", "hello"),
            ("", ""),
            ("{{.name}}", "tink"),
            ("{{.missing}}", "<no value>"),
            ("{{.null}}", "<no value>"),
            ("{{.m.a}}-{{.m.zz}}", "1-<no value>"),
            ("{{.m.zz.deeper}}", "<no value>"),
            (
                "{{.n}} {{.neg}} {{.f}} {{.big}} {{.bigf}} {{.t}}",
                "2 -3 1.5 1000000 1e+06 true",
            ),
            (
                "{{.l}} {{.m}} {{.el}} {{.em}}",
                "[a b] map[a:1 b:2] [] map[]",
            ),
            ("{{.nested}}", "map[s:str x:[1 map[y:<nil>]]]"),
            (
                "{{.}}",
                "map[big:1000000 bigf:1e+06 el:[] em:map[] empty: f:1.5 grid:[[1 2] [3 4]] l:[a b] m:map[a:1 b:2] n:2 name:tink neg:-3 nested:map[s:str x:[1 map[y:<nil>]]] null:<nil> nums:[1 2 3 4] objs:[map[name:a] map[name:b]] t:true zero:0]",
            ),
            (
                "{{1}} {{1.5}} {{1e6}} {{0x10}} {{'a'}} {{-3}} {{3.0}} {{0o17}} {{0b101}} {{1_000}}",
                "1 1.5 1e+06 16 97 -3 3 15 5 1000",
            ),
            (
                "{{\"a\\tb\"}}|{{`a\\n`}}|{{true}} {{false}}",
                "a\tb|a\\n|true false",
            ),
            (
                "{{$}}",
                "map[big:1000000 bigf:1e+06 el:[] em:map[] empty: f:1.5 grid:[[1 2] [3 4]] l:[a b] m:map[a:1 b:2] n:2 name:tink neg:-3 nested:map[s:str x:[1 map[y:<nil>]]] null:<nil> nums:[1 2 3 4] objs:[map[name:a] map[name:b]] t:true zero:0]",
            ),
            ("{{/* comment */}}a{{/* multi\nline */}}b", "ab"),
            ("a  {{- 1 -}}  b", "a1b"),
            ("a\n\t {{- /* c */ -}} \n b", "ab"),
            ("{{-3}} {{- 3}}", "-33"),
            ("{{ .name }}\n{{- .n }}", "tink2"),
            ("x\n{{- \"y\" }}\nz", "xy\nz"),
        ],
        &RenderOptions::default(),
    );
}

#[test]
fn variables_pipelines_and_control() {
    check(
        &[
            ("{{$x := 1}}{{$x}}{{$x = 2}}{{$x}}", "12"),
            ("{{$x := 1}}{{if true}}{{$x := 2}}{{$x}}{{end}}{{$x}}", "21"),
            ("{{$x := 1}}{{if true}}{{$x = 2}}{{end}}{{$x}}", "2"),
            ("{{$x := .m}}{{$x.a}}", "1"),
            ("{{\"abc\" | printf \"%s-%s\" \"x\"}}", "x-abc"),
            ("{{.l | len}}", "2"),
            ("{{printf \"%d\" (add 1 2)}}", "3"),
            ("{{(index .objs 0).name}}", "a"),
            ("{{(.m).a}}", "1"),
            (
                "{{if eq .n 1}}one{{else if eq .n 2}}two{{else}}many{{end}}",
                "two",
            ),
            (
                "{{if eq .n 5}}five{{else if eq .n 6}}six{{else}}many{{end}}",
                "many",
            ),
            (
                "{{if .zero}}T{{else}}F{{end}}{{if .n}}T{{else}}F{{end}}{{if .empty}}T{{else}}F{{end}}{{if .name}}T{{else}}F{{end}}",
                "FTFT",
            ),
            (
                "{{if .el}}T{{else}}F{{end}}{{if .l}}T{{else}}F{{end}}{{if .em}}T{{else}}F{{end}}{{if .m}}T{{else}}F{{end}}",
                "FTFT",
            ),
            (
                "{{if .null}}T{{else}}F{{end}}{{if .missing}}T{{else}}F{{end}}{{if false}}T{{else}}F{{end}}{{if 0.0}}T{{else}}F{{end}}{{if .f}}T{{else}}F{{end}}",
                "FFFFT",
            ),
            ("{{range .l}}[{{.}}]{{end}}", "[a][b]"),
            ("{{range $i, $v := .l}}{{$i}}={{$v}} {{end}}", "0=a 1=b "),
            ("{{range $v := .l}}{{$v}}{{end}}", "ab"),
            ("{{range $k, $v := .m}}{{$k}}:{{$v}},{{end}}", "a:1,b:2,"),
            ("{{range .m}}{{.}}{{end}}", "12"),
            (
                "{{range .el}}x{{else}}empty{{end}}|{{range .missing}}x{{else}}none{{end}}",
                "empty|none",
            ),
            (
                "{{range 3}}{{.}}{{end}}|{{range $i := 2}}{{$i}}{{end}}|{{range 0}}x{{else}}no{{end}}",
                "012|01|no",
            ),
            (
                "{{range .nums}}{{if eq . 3}}{{break}}{{end}}{{.}}{{end}}",
                "12",
            ),
            (
                "{{range .nums}}{{if eq . 2}}{{continue}}{{end}}{{.}}{{end}}",
                "134",
            ),
            (
                "{{range .grid}}{{range .}}{{if eq . 2}}{{break}}{{end}}{{.}}{{end}};{{end}}",
                "1;34;",
            ),
            ("{{range .l}}{{$.name}}{{end}}", "tinktink"),
            (
                "{{$i := 0}}{{range .nums}}{{$i = add $i .}}{{end}}{{$i}}",
                "10",
            ),
            ("{{range $i, $e := .objs}}{{$e.name}}{{$i}}{{end}}", "a0b1"),
            ("{{with .m}}{{.a}}{{end}}", "1"),
            ("{{with .missing}}yes{{else}}no{{end}}", "no"),
            (
                "{{with .missing}}x{{else with .n}}{{.}}{{else}}none{{end}}",
                "2",
            ),
            ("{{with $x := .n}}{{$x}}{{.}}{{end}}", "22"),
            (
                "{{define \"T\"}}<{{.}}>{{end}}{{template \"T\" .n}}{{template \"T\"}}",
                "<2><<no value>>",
            ),
            ("{{define \"T\"}}{{$}}{{end}}{{template \"T\" .l}}", "[a b]"),
            ("{{block \"B\" .}}default {{.name}}{{end}}", "default tink"),
            (
                "{{define \"a\"}}A{{template \"b\" .}}{{end}}{{define \"b\"}}B{{.n}}{{end}}{{template \"a\" .}}",
                "AB2",
            ),
            (
                "{{and 1 0}} {{and 1 2}} {{or 0 \"\"}}| {{or 0 \"x\"}} {{and}}",
                "ERR template: t:1:52: executing \"t\" at <and>: wrong number of args for and: want at least 1 got 0",
            ),
            (
                "{{and 1 0}} {{and 1 2}} {{or 0 \"\"}}| {{or 0 \"x\"}}",
                "0 2 | x",
            ),
            (
                "{{or true (fail \"boom\")}} {{and false (fail \"boom\")}} {{or .missing .n}}",
                "true false 2",
            ),
            (
                "{{not 0}} {{not \"a\"}} {{not .missing}}",
                "true false true",
            ),
            ("{{\"x\" | and 1}} {{0 | or \"\"}}", "x 0"),
        ],
        &RenderOptions::default(),
    );
}

#[test]
fn builtins() {
    check(
        &[
            (
                "{{eq 1 1}} {{eq \"a\" \"b\" \"a\"}} {{eq .n 2}} {{eq .missing \"a\"}} {{eq .name \"tink\"}} {{eq true true}}",
                "true true true false true true",
            ),
            (
                "{{ne 1 2}} {{lt 1 2}} {{le 2 2}} {{gt \"b\" \"a\"}} {{ge 1 2}} {{lt 1.5 2.5}}",
                "true true true true false true",
            ),
            (
                "{{eq 1 1.0}}",
                "ERR template: t:1:2: executing \"t\" at <eq 1 1.0>: error calling eq: incompatible types for comparison",
            ),
            (
                "{{lt true false}}",
                "ERR template: t:1:2: executing \"t\" at <lt true false>: error calling lt: invalid type for comparison",
            ),
            (
                "{{eq .l .l}}",
                "ERR template: t:1:2: executing \"t\" at <eq .l .l>: error calling eq: non-comparable type [a b]: []interface {}",
            ),
            (
                "{{eq 1}}",
                "ERR template: t:1:2: executing \"t\" at <eq 1>: error calling eq: missing argument for comparison",
            ),
            (
                "{{len \"héllo\"}} {{len .m}} {{len .l}} {{len .el}}",
                "6 2 2 0",
            ),
            (
                "{{len 3}}",
                "ERR template: t:1:2: executing \"t\" at <len 3>: error calling len: len of type int",
            ),
            (
                "{{len}}",
                "ERR template: t:1:2: executing \"t\" at <len>: wrong number of args for len: want 1 got 0",
            ),
            (
                "{{index .l 1}} {{index .m \"a\"}} {{index .m \"zz\"}} {{index \"abc\" 1}} {{index .grid 1 0}}",
                "b 1 <no value> 98 3",
            ),
            (
                "{{index .l 5}}",
                "ERR template: t:1:2: executing \"t\" at <index .l 5>: error calling index: index out of range: 5",
            ),
            (
                "{{index .l 2}}",
                "ERR template: t:1:2: executing \"t\" at <index .l 2>: error calling index: reflect: slice index out of range",
            ),
            (
                "{{index .m 1}}",
                "ERR template: t:1:2: executing \"t\" at <index .m 1>: error calling index: value has type int; should be string",
            ),
            (
                "{{index .n 1}}",
                "ERR template: t:1:2: executing \"t\" at <index .n 1>: error calling index: can't index item of type int",
            ),
            (
                "{{index .missing 1}}",
                "ERR template: t:1:2: executing \"t\" at <index .missing 1>: error calling index: index of untyped nil",
            ),
            (
                "{{print 1 2 \"a\" \"b\" 3}}|{{print .missing}}|{{print}}",
                "1 2ab3|<nil>|",
            ),
            ("{{println 1 \"a\"}}", "1 a\n"),
            (
                "{{printf \"%v|%q|%5.2f|%x|%t|%-4d|%04d\" .l \"s\" 3.14159 255 true 7 -7}}",
                "[a b]|\"s\"| 3.14|ff|true|7   |-007",
            ),
            (
                "{{printf \"%v %d %s\" .m .l .n}}",
                "map[a:1 b:2] [%!d(string=a) %!d(string=b)] %!s(int=2)",
            ),
            (
                "{{printf \"%d %d\" 1}}|{{printf \"%d\" 1 2}}|{{printf \"%T %T %T %T\" 1 1.5 \"s\" .l}}",
                "1 %!d(MISSING)|1%!(EXTRA int=2)|int float64 string []interface {}",
            ),
            (
                "{{printf \"%e %E %g %.3g %8.3f|%-8.2f|\" 123456.789 0.000123 1e21 3.14159 2.5 2.5}}",
                "1.234568e+05 1.230000E-04 1e+21 3.14    2.500|2.50    |",
            ),
            (
                "{{printf \"%5s|%-5s|%.2s|%q|%x|% x|%X\" \"ab\" \"ab\" \"abc\" \"a\\\"b\" \"hi\" \"hi\" \"hi\"}}",
                "   ab|ab   |ab|\"a\\\"b\"|6869|68 69|6869",
            ),
            (
                "{{printf \"%c %U %#x %#o %b %o %+d % d\" 65 65 255 8 5 8 5 5}}",
                "A U+0041 0xff 010 101 10 +5  5",
            ),
            (
                "{{printf \"%v %v %s\" .null .missing .missing}}",
                "<nil> <nil> %!s(<nil>)",
            ),
            ("{{printf \"%[2]d %[1]d %%\" 1 2}}", "2 1 %"),
            (
                "{{printf \"%v\" .f}} {{printf \"%.0f\" 2.5}} {{printf \"%.0f\" 3.5}} {{printf \"%.2f\" 0.125}}",
                "1.5 2 4 0.12",
            ),
            ("{{printf \"%6.2f%%\" 99.5}}", " 99.50%"),
            (
                "{{html \"<a href='x'>&\\\"</a>\"}}",
                "&lt;a href=&#39;x&#39;&gt;&amp;&#34;&lt;/a&gt;",
            ),
            (
                "{{html .missing}}|{{html 1 \"<\"}}",
                "&lt;no value&gt;|1&lt;",
            ),
            (
                "{{js \"it's <b>\\\"x\\\"\\n\" }}",
                "it\\'s \\u003Cb\\u003E\\\"x\\\"\\u000A",
            ),
            ("{{js \"a=b&c\"}}", "a\\u003Db\\u0026c"),
            ("{{urlquery \"a b&c=d/é\"}}", "a+b%26c%3Dd%2F%C3%A9"),
            ("{{\"<x>\" | html}}", "&lt;x&gt;"),
            (
                "{{call .name}}",
                "ERR template: t:1:2: executing \"t\" at <call .name>: error calling call: non-function .name of type string",
            ),
            (
                "{{call .missing}}",
                "ERR template: t:1:2: executing \"t\" at <call .missing>: error calling call: call of nil",
            ),
        ],
        &RenderOptions::default(),
    );
}

#[test]
fn missingkey_option() {
    let err = RenderOptions::tinkerbell();
    check(
        &[
            ("{{.name}}", "tink"),
            (
                "{{.missing}}",
                "ERR template: t:1:2: executing \"t\" at <.missing>: map has no entry for key \"missing\"",
            ),
            (
                "a\nb {{ .m.zz.deeper }}",
                "ERR template: t:2:5: executing \"t\" at <.m.zz.deeper>: map has no entry for key \"zz\"",
            ),
            ("{{.null}}", "<no value>"),
            ("{{index .m \"zz\"}}", "<no value>"),
            (
                "{{if .missing}}x{{end}}",
                "ERR template: t:1:5: executing \"t\" at <.missing>: map has no entry for key \"missing\"",
            ),
            (
                "{{define \"T\"}}{{.x}}{{end}}{{template \"T\" .m}}",
                "ERR template: t:1:16: executing \"T\" at <.x>: map has no entry for key \"x\"",
            ),
            (
                "{{template \"T\"}}{{define \"T\"}}{{.x}}{{end}}",
                "ERR template: t:1:32: executing \"T\" at <.x>: nil data; no entry for key \"x\"",
            ),
        ],
        &err,
    );
    let zero = RenderOptions {
        missing_key: MissingKey::Zero,
        ..RenderOptions::default()
    };
    check(&[("{{.missing}}", "<no value>")], &zero);
    assert_eq!(
        "missingkey=error".parse::<MissingKey>(),
        Ok(MissingKey::Error)
    );
    assert_eq!("zero".parse::<MissingKey>(), Ok(MissingKey::Zero));
    assert!("missingkey=bogus".parse::<MissingKey>().is_err());
}

#[test]
fn execution_errors() {
    check(
        &[
            (
                "{{.nested.s.x}}",
                "ERR template: t:1:2: executing \"t\" at <.nested.s.x>: can't evaluate field x in type interface {}",
            ),
            (
                "{{.null.x}}",
                "ERR template: t:1:2: executing \"t\" at <.null.x>: nil pointer evaluating interface {}.x",
            ),
            (
                "{{.m 1}}",
                "ERR template: t:1:2: executing \"t\" at <.m>: m is not a method but has arguments",
            ),
            (
                "{{1 2}}",
                "ERR template: t:1:2: executing \"t\" at <1>: can't give argument to non-function 1",
            ),
            (
                "{{nil}}",
                "ERR template: t:1:2: executing \"t\" at <nil>: nil is not a command",
            ),
            (
                "{{upper 1}}",
                "ERR template: t:1:8: executing \"t\" at <1>: expected string; found 1",
            ),
            (
                "{{upper .n}}",
                "ERR template: t:1:8: executing \"t\" at <.n>: wrong type for value; expected string; got int",
            ),
            (
                "{{upper .missing}}",
                "ERR template: t:1:8: executing \"t\" at <.missing>: invalid value; expected string",
            ),
            (
                "{{repeat 1.5 \"a\"}}",
                "ERR template: t:1:9: executing \"t\" at <1.5>: expected integer; found 1.5",
            ),
            (
                "{{fail \"boom\"}}",
                "ERR template: t:1:2: executing \"t\" at <fail \"boom\">: error calling fail: boom",
            ),
            (
                "line1\n  {{ template \"nope\" }}",
                "ERR template: t:2:14: executing \"t\" at <{{template \"nope\"}}>: template \"nope\" not defined",
            ),
            (
                "{{range .name}}{{end}}",
                "ERR template: t:1:8: executing \"t\" at <.name>: range can't iterate over tink",
            ),
            (
                "{{range $i, $v := 3}}{{end}}",
                "ERR template: t:1:18: executing \"t\" at <3>: can't use 3 to iterate over more than one variable",
            ),
            (
                "{{printf \"%d\" 1 | printf \"%s-%s\" \"a\" | upper | lower | len | add 1 2}}",
                "6",
            ),
            (
                "{{template \"T\" .}}{{define \"T\"}}{{printf \"%s\" .name | printf \"%s %s %s\" 1 2}}{{end}}",
                "%!s(int=1) %!s(int=2) tink",
            ),
            (
                "{{define \"r\"}}{{template \"r\" .}}{{end}}{{template \"r\" .}}",
                "ERR template: t:1:25: executing \"r\" at <{{template \"r\" .}}>: exceeded maximum template depth (100)",
            ),
        ],
        &RenderOptions::default(),
    );
}

#[test]
fn parse_errors() {
    let cases: &[(&str, &str)] = &[
        ("{{.x", "template: t:1:4: unclosed action"),
        ("{{if .x}}a", "template: t:1:10: unexpected EOF"),
        ("{{end}}", "template: t:1:2: unexpected {{end}}"),
        ("{{else}}", "template: t:1:6: unexpected {{else}}"),
        (
            "{{nofunc 1}}",
            "template: t:1:2: function \"nofunc\" not defined",
        ),
        (
            "a\nb\n{{ nofn }}",
            "template: t:3:3: function \"nofn\" not defined",
        ),
        ("{{$x}}", "template: t:1:2: undefined variable \"$x\""),
        ("{{$x = 1}}", "template: t:1:2: undefined variable \"$x\""),
        ("{{break}}", "template: t:1:2: {{break}} outside {{range}}"),
        (
            "{{define \"a\"}}x{{end}}{{define \"a\"}}y{{end}}",
            "template: t:1:42: template: multiple definition of template \"a\"",
        ),
        (
            "{{.x | 1}}",
            "template: t:1:7: non executable command in pipeline stage 2",
        ),
        ("{{}}", "template: t:1:2: missing value for command"),
        (
            "{{\"unterminated}}",
            "template: t:1:2: unterminated quoted string",
        ),
        ("{{3x}}", "template: t:1:2: bad number syntax: \"3x\""),
        ("{{(1}}", "template: t:1:4: unclosed left paren"),
        ("{{1)}}", "template: t:1:3: unexpected \")\" in command"),
        (
            "{{range $a, $b, $c := .}}{{end}}",
            "template: t:1:14: too many declarations in range",
        ),
        ("{{if}}{{end}}", "template: t:1:4: missing value for if"),
        (
            "{{with .x}}{{else}}{{else}}{{end}}",
            "template: t:1:25: expected end; found {{else}}",
        ),
        (
            "{{template .x}}",
            "template: t:1:11: unexpected \".x\" in template clause",
        ),
        ("{{/* unclosed", "template: t:1:2: unclosed comment"),
        ("{{.x}", "template: t:1:2: bad character U+007D '}'"),
        (
            "{{.x\n.y",
            "template: t:2:2: unclosed action started at t:1",
        ),
        (
            "{{ 1 ! 2 }}",
            "template: t:1:5: unexpected \"!\" in operand",
        ),
        (
            "{{ \"a\".b }}",
            "template: t:1:3: unexpected . after term \"\\\"a\\\"\"",
        ),
    ];
    let mut failures = Vec::new();
    for (src, want) in cases {
        match Template::parse("t", src) {
            Ok(_) => failures.push(format!("{src:?}: parsed, want {want:?}")),
            Err(e) if e.to_string() != *want => failures.push(format!(
                "{src:?}:\n   want {want:?}\n    got {:?}",
                e.to_string()
            )),
            Err(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sprig_strings_and_conversions() {
    check(
        &[
            (
                "{{ \"hello world\" | upper }} {{ \"HeLLo\" | lower }} {{ title \"hello wOrld\" }} {{ untitle \"Hello World\" }}",
                "HELLO WORLD hello Hello WOrld hello world",
            ),
            (
                "[{{ trim \"  a b \\n\" }}] {{ trimAll \"$\" \"$$5.00$\" }} {{ trimSuffix \"-\" \"a-\" }} {{ trimPrefix \"-\" \"-a\" }} {{ trimall \"x\" \"xax\" }}",
                "[a b] 5.00 a a a",
            ),
            (
                "{{ nospace \"a b \\t c\" }} {{ initials \"First Try\" }} {{ swapcase \"This Is A.Test\" }}",
                "abc FT tHIS iS a.tEST",
            ),
            (
                "{{ snakecase \"FirstName\" }} {{ camelcase \"http_server\" }} {{ kebabcase \"FirstName\" }}",
                "first_name HttpServer first-name",
            ),
            (
                "{{ abbrev 5 \"hello world\" }} {{ abbrevboth 5 10 \"1234 5678 9123\" }} {{ abbrev 3 \"hello\" }}",
                "he... ...5678... hello",
            ),
            (
                "{{ trunc 5 \"hello world\" }} {{ trunc -5 \"hello world\" }} {{ trunc 50 \"hi\" }}",
                "hello world hi",
            ),
            (
                "{{ substr 0 5 \"hello world\" }} {{ substr 6 -1 \"hello world\" }}",
                "hello world",
            ),
            ("{{ repeat 3 \"ab\" }} {{ \"x\" | repeat 2 }}", "ababab xx"),
            (
                "{{ contains \"cat\" \"catch\" }} {{ hasPrefix \"cat\" \"catch\" }} {{ hasSuffix \"cat\" \"catch\" }} {{ \"catch\" | contains \"dog\" }}",
                "true true false false",
            ),
            (
                "{{ quote \"a\" 1 }} {{ squote \"a\" }} {{ cat \"a\" 1 nil \"b\" }}",
                "\"a\" \"1\" 'a' a 1 b",
            ),
            (
                "{{ indent 2 \"a\\nb\" }}|{{ nindent 2 \"a\" }}",
                "  a\n  b|\n  a",
            ),
            (
                "{{ replace \" \" \"-\" \"a b c\" }} {{ plural \"one\" \"many\" 2 }} {{ plural \"one\" \"many\" 1 }}",
                "a-b-c many one",
            ),
            (
                "{{ wrap 5 \"hello world foo\" }}|{{ wrapWith 5 \"\\t\" \"Hello World\" }}",
                "hello\nworld\nfoo|Hello\tWorld",
            ),
            (
                "{{ sha1sum \"abc\" }} {{ adler32sum \"Wikipedia\" }}",
                "a9993e364706816aba3e25717850c26c9cd0d89d 300286872",
            ),
            (
                "{{ sha256sum \"abc\" }}",
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            (
                "{{ toString 1.5 }} {{ toString .l }} {{ typeOf (toString 1) }}",
                "1.5 [a b] string",
            ),
            (
                "{{ atoi \"42\" }} {{ atoi \"x\" }} {{ int \"12\" }} {{ int64 3.9 }} {{ float64 \"1.5\" }} {{ int \"0x10\" }} {{ int .t }}",
                "42 0 12 3 1.5 16 1",
            ),
            (
                "{{ seq 3 }}|{{ seq 2 5 }}|{{ seq 0 2 10 }}|{{ seq 5 2 }}|{{ seq 0 }}",
                "1 2 3|2 3 4 5|0 2 4 6 8 10|5 4 3 2|1 0",
            ),
            (
                "{{ split \"$\" \"foo$bar\" }} {{ splitList \",\" \"a,b\" }} {{ splitn \"$\" 2 \"foo$bar$baz\" }} {{ (split \"$\" \"foo$bar\")._1 }}",
                "map[_0:foo _1:bar] [a b] map[_0:foo _1:bar$baz] bar",
            ),
            (
                "{{ toStrings (list 1 2 nil \"a\") }} {{ until 3 }} {{ untilStep 0 10 3 }} {{ until -2 }}",
                "[1 2 a] [0 1 2] [0 3 6 9] [0 -1]",
            ),
            (
                "{{ hello }} {{ duration 95 }} {{ duration \"3600\" }}",
                "Hello! 1m35s 1h0m0s",
            ),
            (
                "{{ b64enc \"hello\" }} {{ b64dec \"aGVsbG8=\" }} {{ b64dec \"!!\" }} {{ b32enc \"hello\" }} {{ b32dec \"NBSWY3DP\" }}",
                "aGVsbG8= hello illegal base64 data at input byte 0 NBSWY3DP hello",
            ),
            (
                "{{ base \"/a/b.txt\" }} {{ dir \"/a/b.txt\" }} {{ clean \"a/../b//c\" }} {{ ext \"/a/b.txt\" }} {{ isAbs \"/a\" }} {{ osBase \"x/y\" }}",
                "b.txt /a b/c .txt true y",
            ),
            (
                "{{ regexMatch \"^a.c$\" \"abc\" }} {{ regexFind \"[0-9]+\" \"ab123cd45\" }} {{ regexFindAll \"[0-9]+\" \"ab123cd45\" -1 }} {{ regexFindAll \"[0-9]+\" \"ab123cd45\" 1 }}",
                "true 123 [123 45] [123]",
            ),
            (
                "{{ regexReplaceAll \"a(x*)b\" \"-ab-axxb-\" \"${1}W\" }} {{ regexReplaceAllLiteral \"a(x*)b\" \"-ab-axxb-\" \"${1}\" }} {{ regexSplit \"z+\" \"pizza\" -1 }} {{ regexQuoteMeta \"1.2\" }}",
                "-W-xxW- -${1}-${1}- [pi a] 1\\.2",
            ),
            ("{{ regexMatch \"(\" \"x\" }}", "false"),
            (
                "{{ mustRegexMatch \"(\" \"x\" }}",
                "ERR template: t:1:3: executing \"t\" at <mustRegexMatch \"(\" \"...>: error calling mustRegexMatch: error parsing regexp: unclosed group in `(`",
            ),
        ],
        &RenderOptions::default(),
    );
}

#[test]
fn sprig_math_lists_dicts_defaults() {
    check(
        &[
            (
                "{{ add 1 2 3 }} {{ add1 5 }} {{ sub 5 3 }} {{ div 7 2 }} {{ mod 7 2 }} {{ mul 2 3 4 }} {{ max 1 5 3 }} {{ min 4 2 8 }} {{ biggest 1 9 }}",
                "6 6 2 3 1 24 5 2 9",
            ),
            ("{{ add \"2\" 1.9 }} {{ add .n .n }}", "3 4"),
            (
                "{{ addf 0.1 0.2 }} {{ add1f 1.5 }} {{ subf 1.5 0.5 }} {{ mulf 1.5 2 }} {{ divf 10 4 }} {{ maxf 1.5 2.5 }} {{ minf 1.5 2.5 }}",
                "0.3 2.5 1 3 2.5 2.5 1.5",
            ),
            (
                "{{ ceil 1.2 }} {{ floor 1.8 }} {{ round 3.14159 2 }} {{ round 2.5 0 }} {{ round 1.234 1 0.3 }}",
                "2 1 3.14 3 1.3",
            ),
            (
                "{{ div 1 0 }}",
                "ERR template: t:1:3: executing \"t\" at <div 1 0>: error calling div: runtime error: integer divide by zero",
            ),
            (
                "{{ join \"-\" (list \"a\" \"b\" 1) }} {{ join \",\" .l }} {{ sortAlpha (list \"c\" \"a\" \"b\") }}",
                "a-b-1 a,b [a b c]",
            ),
            (
                "{{ default \"x\" .missing }} {{ default \"x\" \"\" }} {{ default \"x\" \"y\" }} {{ \"\" | default \"d\" }} {{ .n | default 5 }} {{ default 1 0 }}",
                "x x y d 2 1",
            ),
            (
                "{{ empty 0 }} {{ empty (list) }} {{ empty .m }} {{ empty .missing }} {{ empty false }} {{ empty \"a\" }}",
                "true true false true true false",
            ),
            (
                "{{ coalesce .missing \"\" \"z\" }} {{ coalesce 0 \"\" }} {{ all 1 \"a\" }} {{ all 1 0 }} {{ any 0 \"\" }} {{ any 0 1 }}",
                "z <no value> true false false true",
            ),
            (
                "{{ compact (list 1 0 \"\" \"a\" nil) }} {{ ternary \"a\" \"b\" true }} {{ ternary \"a\" \"b\" false }} {{ true | ternary \"y\" \"n\" }}",
                "[1 a] a b y",
            ),
            (
                "{{ toJson .m }} {{ toJson .nested }} {{ toJson \"<x>\" }} {{ toRawJson \"<x>\" }} {{ toJson .f }} {{ toJson .missing }}",
                "{\"a\":1,\"b\":2} {\"s\":\"str\",\"x\":[1,{\"y\":null}]} \"\\u003cx\\u003e\" \"<x>\" 1.5 null",
            ),
            ("{{ toPrettyJson .m }}", "{\n  \"a\": 1,\n  \"b\": 2\n}"),
            (
                "{{ (fromJson \"{\\\"a\\\":[1,2.5]}\").a }} {{ fromJson \"bad\" }} {{ mustFromJson \"[1]\" }}",
                "[1 2.5] <no value> [1]",
            ),
            (
                "{{ typeOf 1 }} {{ typeOf 1.5 }} {{ typeOf \"a\" }} {{ typeOf .l }} {{ typeOf .m }} {{ typeOf .missing }} {{ kindOf .m }} {{ kindOf .l }} {{ kindIs \"int\" 1 }} {{ typeIs \"string\" \"a\" }} {{ typeIsLike \"string\" \"a\" }}",
                "int float64 string []interface {} map[string]interface {} <nil> map slice true true true",
            ),
            (
                "{{ deepEqual (list 1 (dict \"a\" 1)) (list 1 (dict \"a\" 1)) }} {{ deepEqual 1 \"1\" }}",
                "true false",
            ),
            (
                "{{ list 1 \"a\" }} {{ tuple 1 }} {{ dict \"a\" 1 \"b\" 2 }} {{ dict \"a\" }} {{ dict }}",
                "[1 a] [1] map[a:1 b:2] map[a:] map[]",
            ),
            (
                "{{ get (dict \"a\" 1) \"a\" }}|{{ get (dict \"a\" 1) \"z\" }}|{{ hasKey .m \"a\" }} {{ hasKey .m \"z\" }}",
                "1||true false",
            ),
            (
                "{{ $d := dict }}{{ $_ := set $d \"k\" \"v\" }}{{ $d.k }} {{ $_ := unset $d \"k\" }}{{ $d }} {{ $d = set $d \"x\" 1 }}{{ $d }}",
                "v map[] map[x:1]",
            ),
            (
                "{{ pluck \"a\" (dict \"a\" 1) (dict \"b\" 2) (dict \"a\" 3) }} {{ keys (dict \"b\" 1 \"a\" 2) }} {{ values (dict \"b\" 1 \"a\" 2) }} {{ keys .m (dict \"c\" 1) }}",
                "[1 3] [a b] [2 1] [a b c]",
            ),
            (
                "{{ pick (dict \"a\" 1 \"b\" 2) \"a\" }} {{ omit (dict \"a\" 1 \"b\" 2) \"a\" }}",
                "map[a:1] map[b:2]",
            ),
            (
                "{{ merge (dict \"a\" 1 \"e\" \"\") (dict \"a\" 2 \"b\" 3 \"e\" \"x\") }} {{ mergeOverwrite (dict \"a\" 1 \"c\" 5) (dict \"a\" 2 \"b\" 3 \"c\" 0) }}",
                "map[a:1 b:3 e:x] map[a:2 b:3 c:5]",
            ),
            (
                "{{ merge (dict \"n\" (dict \"a\" 1)) (dict \"n\" (dict \"a\" 9 \"b\" 2)) }}",
                "map[n:map[a:1 b:2]]",
            ),
            (
                "{{ append (list 1) 2 }} {{ push .l \"c\" }} {{ prepend (list 1) 0 }} {{ first (list 1 2) }} {{ last (list 1 2) }} {{ rest (list 1 2) }} {{ initial (list 1 2) }} {{ first (list) }}",
                "[1 2] [a b c] [0 1] 1 2 [2] [1] <no value>",
            ),
            (
                "{{ reverse (list 1 2 3) }} {{ uniq (list 1 1 2 \"a\" \"a\") }} {{ without (list 1 2 3 2) 2 }} {{ has 2 (list 1 2) }} {{ has \"z\" .l }}",
                "[3 2 1] [1 2 a] [1 3] true false",
            ),
            (
                "{{ slice (list 1 2 3) 1 }} {{ slice (list 1 2 3) 1 2 }} {{ slice (list 1 2 3) }} {{ concat (list 1) (list 2 3) .l }} {{ chunk 2 (list 1 2 3) }}",
                "[2 3] [2] [1 2 3] [1 2 3 a b] [[1 2] [3]]",
            ),
            (
                "{{ dig \"a\" \"b\" \"def\" (dict \"a\" (dict \"b\" 1)) }} {{ dig \"a\" \"x\" \"def\" (dict \"a\" (dict \"b\" 1)) }}",
                "1 def",
            ),
            (
                "{{ first \"abc\" }}",
                "ERR template: t:1:3: executing \"t\" at <first \"abc\">: error calling first: Cannot find first on type string",
            ),
            (
                "{{ slice \"abc\" 1 }}",
                "ERR template: t:1:3: executing \"t\" at <slice \"abc\" 1>: error calling slice: list should be type of slice or array but string",
            ),
            ("{{ deepCopy .m | toJson }}", "{\"a\":1,\"b\":2}"),
        ],
        &RenderOptions::default(),
    );
}

#[test]
fn tinkerbell_functions() {
    check(
        &[
            (
                "{{ formatPartition \"/dev/sda\" 1 }} {{ formatPartition \"/dev/nvme0n1\" 1 }} {{ formatPartition \"/dev/disk/by-id/x\" 1 }} {{ formatPartition \"/dev/loop\" 4 }}",
                "/dev/sda1 /dev/nvme0n1p1 /dev/disk/by-id/x-part1 /dev/loop4",
            ),
            (
                "{{ netmaskToPrefixLength \"255.255.255.0\" }} {{ netmaskToPrefixLength \"255.255.0.0\" }} {{ netmaskToPrefixLength \"0.0.0.0\" }}",
                "24 16 0",
            ),
            (
                "{{ netmaskToPrefixLength \"bad\" }}",
                "ERR template: t:1:3: executing \"t\" at <netmaskToPrefixLengt...>: error calling netmaskToPrefixLength: invalid netmask format: bad",
            ),
            (
                "{{ netmaskToPrefixLength \"::1\" }}",
                "ERR template: t:1:3: executing \"t\" at <netmaskToPrefixLengt...>: error calling netmaskToPrefixLength: netmask must be IPv4: ::1",
            ),
            (
                "{{ formatPartition \"/dev/sda\" \"1\" }}",
                "ERR template: t:1:30: executing \"t\" at <\"1\">: expected integer; found \"1\"",
            ),
            (
                "{{ toYaml .m }}|{{ toYaml .l }}|{{ toYaml .missing }}|{{ toYaml .em }}",
                "a: 1\nb: 2|- a\n- b|null|{}",
            ),
            (
                "{{ .nested | toYaml | nindent 2 }}",
                "\n  s: str\n  x:\n  - 1\n  - \"y\": null",
            ),
            (
                "{{ $m := fromYaml \"name: alice\\nage: 30\" }}{{ $m.name }} {{ $m.age }}",
                "alice 30",
            ),
            (
                "{{ fromYaml \"\" }}",
                "ERR template: t:1:3: executing \"t\" at <fromYaml \"\">: error calling fromYaml: fromYaml: empty YAML input",
            ),
        ],
        &RenderOptions::default(),
    );
}

#[test]
fn output_cap_and_limits() {
    let small = RenderOptions {
        max_output_bytes: 100,
        ..RenderOptions::default()
    };
    check(
        &[
            (
                "{{range 10}}0123456789{{end}}",
                "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789",
            ),
            (
                "{{range 11}}0123456789{{end}}",
                "ERR template: t: rendered output exceeds 100 bytes",
            ),
            (
                "{{ repeat 1000 \"x\" | len }}",
                "ERR template: t:1:3: executing \"t\" at <repeat 1000 \"x\">: error calling repeat: result exceeds 100 bytes",
            ),
            (
                "{{ until 1000 | len }}",
                "ERR template: t:1:3: executing \"t\" at <until 1000>: error calling until: result exceeds 100 bytes",
            ),
        ],
        &small,
    );
    let steps = RenderOptions {
        max_steps: 1000,
        ..RenderOptions::default()
    };
    check(
        &[(
            "{{range 100000}}{{end}}",
            "ERR template: t: execution exceeded 1000 steps",
        )],
        &steps,
    );
    let shallow = RenderOptions {
        max_template_depth: 3,
        ..RenderOptions::default()
    };
    check(
        &[(
            "{{define \"r\"}}x{{if .}}{{template \"r\" (sub . 1)}}{{end}}{{end}}{{template \"r\" 3}}|{{template \"r\" 5}}",
            "ERR template: t:1:34: executing \"r\" at <{{template \"r\" (sub ...>: exceeded maximum template depth (3)",
        )],
        &shallow,
    );
    // the default cap is Tinkerbell's 256 KiB
    assert_eq!(RenderOptions::default().max_output_bytes, 256 * 1024);
}

#[test]
fn render_named_template_and_listing() {
    let t = Template::parse(
        "main",
        "{{define \"a\"}}A{{.}}{{end}}{{define \"b\"}}B{{end}}main",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.defined_templates(), vec!["a", "b", "main"]);
    assert_eq!(
        t.render_template("a", &json!(1), &RenderOptions::default())
            .ok()
            .as_deref(),
        Some("A1")
    );
    assert_eq!(
        t.render(&json!(null), &RenderOptions::default())
            .ok()
            .as_deref(),
        Some("main")
    );
    let err = t
        .render_template("zz", &json!(1), &RenderOptions::default())
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some(
            "template: main:0:0: executing \"zz\" at <>: no template \"zz\" associated with template \"main\""
        )
    );
    let names = tink_template::function_names();
    for f in [
        "and",
        "index",
        "printf",
        "formatPartition",
        "toYaml",
        "default",
        "regexFind",
        "b64enc",
    ] {
        assert!(names.contains(&f), "{f}");
    }
    for f in [
        "env",
        "expandenv",
        "now",
        "randAlphaNum",
        "uuidv4",
        "getHostByName",
        "shuffle",
    ] {
        assert!(!names.contains(&f), "{f} must not be available");
    }
}

#[test]
fn api_types_are_thread_safe() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Template>();
    assert_send_sync::<RenderOptions>();
    assert_send_sync::<tink_template::RenderError>();
    assert_send_sync::<tink_template::ParseError>();
    assert_send_sync::<tink_template::Error>();
}

#[test]
fn index_of_json_null_is_untyped_nil() {
    check(
        &[(
            "{{index .null 0}}",
            "ERR template: t:1:2: executing \"t\" at <index .null 0>: error calling index: index of untyped nil",
        )],
        &RenderOptions::default(),
    );
}
