//! Go `text/template` compatible template engine with Sprig and Tinkerbell template functions.
//!
//! Existing Tinkerbell templates render unchanged: the syntax, the execution semantics, the
//! printing of values (Go's `fmt`), the built-ins and the error messages follow Go's
//! `text/template`, and the function map is Tinkerbell's (`sprig.HermeticTxtFuncMap()` plus
//! `formatPartition`, `netmaskToPrefixLength`, `toYaml`, `fromYaml`).
//!
//! ```
//! use tink_template::{RenderOptions, Template};
//! let t = Template::parse("wf", "{{ formatPartition (index .Hardware.Disks 0) 1 }}").unwrap();
//! let data = serde_json::json!({"Hardware": {"Disks": ["/dev/nvme0n1"]}});
//! assert_eq!(t.render(&data, &RenderOptions::default()).unwrap(), "/dev/nvme0n1p1");
//! ```
//!
//! Data is a [`serde_json::Value`]. A JSON number that is an integer (fits `i64`) is a Go `int`
//! and prints as digits (`1000000`); any other number is a Go `float64` and prints as Go's `%v`
//! prints one (`1.5`, `1e+21`; an integral float such as the result of `float64 1` prints `1`).
//! This is what Go gives for data decoded with `yaml.v3` or `json.Decoder.UseNumber`, and it avoids
//! the `1e+06` surprise of plain `float64` decoding. `fromYaml`/`fromJson` results follow the same
//! rule. Map keys are visited in sorted order, as Go's `range` and `fmt` do; Sprig's `keys` and
//! `values` (random order in Go) are sorted too.
//!
//! Safety limits (all in [`RenderOptions`]): the output is capped (256 KiB by default), nested
//! `{{template}}` calls are limited (default 100), execution steps are limited (default 10
//! million; Go has no such limit, it protects the caller from loops that print nothing), and the
//! parser refuses nesting deeper than [`MAX_PARSE_DEPTH`], the executor recursion deeper than
//! [`MAX_EXEC_NESTING`], and function results nested deeper than 200 levels or larger than the
//! output cap. None of these can overflow a 2 MiB stack (tokio's worker threads).
//!
//! Differences from Go, all deliberate: parse errors carry a column (`template: NAME:LINE:COL:
//! msg`, Go prints only the line); the limits above; an `int` argument also accepts the `int64`
//! results of Sprig's math functions (Go refuses `repeat (add 1 2) "x"`); the Sprig functions
//! that read the clock, randomness, the environment or the network are not available (see the
//! list in the `sprig` module), nor `semver`, `semverCompare`, `urlParse` and `urlJoin`.
#![forbid(unsafe_code)]

mod builtins;
mod error;
mod exec;
mod funcdef;
mod funcs;
mod gofmt;
mod hash;
mod json;
mod lex;
mod options;
mod parse;
mod sprig;
mod tink;
mod value;

use std::collections::BTreeMap;

pub use error::{Error, RenderError};
pub use exec::MAX_EXEC_NESTING;
pub use options::{DEFAULT_MAX_OUTPUT_BYTES, MissingKey, RenderOptions};
pub use parse::{MAX_PARSE_DEPTH, ParseError};

/// A parsed template (the main one plus its `define`s and `block`s). Cheap to render many times;
/// `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Template {
    name: String,
    source: String,
    trees: BTreeMap<String, Vec<parse::Node>>,
}

impl Template {
    /// Parses `source` as the template `name` (the name shown in error messages).
    pub fn parse(name: &str, source: &str) -> Result<Template, ParseError> {
        let parsed = parse::parse(name, source, &|f| funcs::lookup(f).is_some())?;
        Ok(Template {
            name: name.to_string(),
            source: source.to_string(),
            trees: parsed.trees,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The names of the templates defined in this source (including the main one).
    pub fn defined_templates(&self) -> Vec<&str> {
        self.trees.keys().map(String::as_str).collect()
    }

    /// Executes the template on `data`.
    pub fn render(
        &self,
        data: &serde_json::Value,
        opts: &RenderOptions,
    ) -> Result<String, RenderError> {
        self.render_template(&self.name, data, opts)
    }

    /// Executes the named (`define`d) template on `data`, like Go's `ExecuteTemplate`.
    pub fn render_template(
        &self,
        name: &str,
        data: &serde_json::Value,
        opts: &RenderOptions,
    ) -> Result<String, RenderError> {
        if json_depth(data, 0) > value::MAX_VALUE_DEPTH {
            return Err(RenderError::DataTooDeep {
                template: self.name.clone(),
                limit: value::MAX_VALUE_DEPTH,
            });
        }
        // Go's `Execute(w, nil)`: dot is the invalid value, so `{{.x}}` is `<no value>` (or
        // "nil data; no entry for key" with `missingkey=error`), not a nil-pointer error.
        let data = if data.is_null() {
            value::Value::Missing
        } else {
            value::Value::from_json(data)
        };
        let Some((key, _)) = self.trees.get_key_value(name) else {
            return Err(RenderError::Exec {
                template: self.name.clone(),
                line: 0,
                col: 0,
                executing: name.to_string(),
                context: String::new(),
                message: format!(
                    "no template {} associated with template {}",
                    gofmt::quote(name),
                    gofmt::quote(&self.name)
                ),
            });
        };
        let mut ex = exec::Exec::new(&self.name, key, &self.source, &self.trees, opts);
        ex.run(data)?;
        Ok(ex.out)
    }
}

fn json_depth(v: &serde_json::Value, d: usize) -> usize {
    if d > value::MAX_VALUE_DEPTH {
        return d;
    }
    match v {
        serde_json::Value::Array(a) => a
            .iter()
            .map(|x| json_depth(x, d + 1))
            .max()
            .unwrap_or(d + 1),
        serde_json::Value::Object(o) => o
            .values()
            .map(|x| json_depth(x, d + 1))
            .max()
            .unwrap_or(d + 1),
        _ => d,
    }
}

/// Parses and renders in one call.
pub fn render(
    name: &str,
    source: &str,
    data: &serde_json::Value,
    opts: &RenderOptions,
) -> Result<String, Error> {
    Ok(Template::parse(name, source)?.render(data, opts)?)
}

/// Every function a template can call (Go built-ins, Sprig's hermetic set, Tinkerbell's), sorted.
pub fn function_names() -> Vec<&'static str> {
    funcs::names()
}
