//! WorkflowRuleSet patterns: compiled once from `spec.rules`, evaluated against a machine's
//! in-band inventory (the JSON of tink-inventory's `Attributes`, as stored in
//! `Hardware.status.attributes.inBand`). Pure code: no IO, no clock.
//!
//! # Semantics
//!
//! - A rule set matches when any of its rules matches (the first one, in order, is reported).
//!   A rule matches when every entry of its `match` holds.
//! - A `match` key is a dotted path of camelCase field names (`chassis.vendor`,
//!   `blockDevices.sizeBytes`). Walking the path, a list is entered element by element, so a
//!   path reaches any number of values ("leaves"): `blockDevices.driveType` reaches one value per
//!   disk. `null` and absent fields reach nothing. Only paths of the attributes shape are
//!   accepted ([`KNOWN_PATHS`]): a misspelt path would otherwise never match, silently.
//! - Value conditions (`equals`, `oneOf`, `prefix`, `min`, `max`) hold when at least one leaf
//!   satisfies all of them together (Quamina's "an array matches when an element does").
//!   `equals`/`oneOf` compare the leaf's text: strings as they are, numbers and booleans in their
//!   JSON spelling. `prefix` needs a string leaf, `min`/`max` (inclusive) a number leaf.
//!   `exists: true` holds when the path reaches a value, `exists: false` when it reaches none.
//! - `count` counts the leaves (for a list path, its elements) and holds when the number is
//!   within `min..=max`. With `where`, only the elements for which every `where` entry holds (its
//!   path relative to the element) are counted; `where` without `count` means at least one.
//!
//! # Failure cases
//!
//! [`compile`] refuses anything that cannot be evaluated or can never mean what was written
//! (an unknown path, an empty prefix, `min` above `max`, `count` mixed with value conditions,
//! `exists: false` with a value condition, a pattern with no condition) with one
//! [`PatternError`] per problem, each naming its field path
//! (`spec.rules[2].match.blockDevices.count.min: ...`). Evaluation cannot fail: an inventory of
//! an unexpected shape (a string where an object was expected) simply reaches no values.
#![forbid(unsafe_code)]

use std::cmp::Ordering;
use std::collections::HashSet;
use std::fmt;

use serde_json::Value;
use tink_api::v1alpha2::{CountRange, FieldPattern, ValuePattern, WorkflowRuleSetSpec};

/// Every attribute path a rule may name: the fields of Tinkerbell's in-band `Attributes`
/// (tink-inventory's `Attributes`, JSON names), lists included as their own path. A unit test
/// checks it against a fully populated `Attributes`.
pub const KNOWN_PATHS: &[&str] = &[
    "lastUpdated",
    "collectionMethod",
    "cpu",
    "cpu.totalCores",
    "cpu.totalThreads",
    "cpu.sockets",
    "cpu.sockets.slot",
    "cpu.sockets.vendor",
    "cpu.sockets.model",
    "cpu.sockets.cores",
    "cpu.sockets.threads",
    "cpu.sockets.clockSpeedMHz",
    "cpu.sockets.serialNumber",
    "cpu.sockets.capabilities",
    "memory",
    "memory.totalBytes",
    "memory.usableBytes",
    "memory.modules",
    "memory.modules.slot",
    "memory.modules.vendor",
    "memory.modules.serialNumber",
    "memory.modules.partNumber",
    "memory.modules.sizeBytes",
    "memory.modules.speedMHz",
    "memory.modules.formFactor",
    "blockDevices",
    "blockDevices.name",
    "blockDevices.controllerType",
    "blockDevices.driveType",
    "blockDevices.vendor",
    "blockDevices.model",
    "blockDevices.serialNumber",
    "blockDevices.wwn",
    "blockDevices.sizeBytes",
    "blockDevices.physicalBlockSizeBytes",
    "networkInterfaces",
    "networkInterfaces.name",
    "networkInterfaces.vendor",
    "networkInterfaces.model",
    "networkInterfaces.ports",
    "networkInterfaces.ports.mac",
    "networkInterfaces.ports.speedMbps",
    "networkInterfaces.ports.mtu",
    "networkInterfaces.ports.linkStatus",
    "pciDevices",
    "pciDevices.vendor",
    "pciDevices.model",
    "pciDevices.class",
    "pciDevices.driver",
    "chassis",
    "chassis.vendor",
    "chassis.model",
    "chassis.serialNumber",
    "baseboard",
    "baseboard.vendor",
    "baseboard.model",
    "baseboard.serialNumber",
    "baseboard.firmwareVersion",
    "bios",
    "bios.vendor",
    "bios.firmwareVersion",
    "bios.releaseDate",
    "product",
    "product.name",
    "product.vendor",
    "product.model",
    "product.serialNumber",
];

/// One problem of a rule set's patterns, at a field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PatternError {
    /// The field path, e.g. `spec.rules[2].match.blockDevices.count.min`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl PatternError {
    fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// All problems of a rule set, joined as one message (`a: x; b: y`).
pub fn join_errors(errors: &[PatternError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Conditions on one value.
#[derive(Debug, Clone, Default, PartialEq)]
struct ValueTest {
    equals: Option<String>,
    one_of: Vec<String>,
    prefix: Option<String>,
    min: Option<i64>,
    max: Option<i64>,
    /// `exists: true` alone, or any value condition: some leaf must satisfy them all.
    /// `exists: false`: no leaf at all.
    absent: bool,
}

impl ValueTest {
    /// Whether the leaf satisfies every value condition.
    fn leaf(&self, v: &Value) -> bool {
        if let Some(e) = &self.equals
            && !text_eq(v, e)
        {
            return false;
        }
        if !self.one_of.is_empty() && !self.one_of.iter().any(|e| text_eq(v, e)) {
            return false;
        }
        if let Some(p) = &self.prefix {
            match v {
                Value::String(s) if s.starts_with(p.as_str()) => {}
                _ => return false,
            }
        }
        if let Some(min) = self.min
            && !matches!(cmp_num(v, min), Some(Ordering::Greater | Ordering::Equal))
        {
            return false;
        }
        if let Some(max) = self.max
            && !matches!(cmp_num(v, max), Some(Ordering::Less | Ordering::Equal))
        {
            return false;
        }
        true
    }

    /// Whether the values at `path` under `root` satisfy the test.
    fn holds(&self, root: &Value, path: &[String]) -> bool {
        if self.absent {
            !any_leaf(root, path)
        } else {
            visit(root, path, &mut |v| self.leaf(v))
        }
    }

    fn describe(&self) -> String {
        if self.absent {
            return "no value".into();
        }
        let mut parts = Vec::new();
        if let Some(e) = &self.equals {
            parts.push(format!("equal to {e:?}"));
        }
        if !self.one_of.is_empty() {
            parts.push(format!("one of {:?}", self.one_of));
        }
        if let Some(p) = &self.prefix {
            parts.push(format!("starting with {p:?}"));
        }
        if let Some(m) = self.min {
            parts.push(format!("at least {m}"));
        }
        if let Some(m) = self.max {
            parts.push(format!("at most {m}"));
        }
        if parts.is_empty() {
            "a value".into()
        } else {
            format!("a value {}", parts.join(" and "))
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Value(ValueTest),
    Count {
        min: u32,
        max: Option<u32>,
        /// `where`: relative path and test; all must hold on an element for it to count.
        filter: Vec<(Vec<String>, ValueTest)>,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct Condition {
    /// The `match` key as written.
    key: String,
    path: Vec<String>,
    test: Test,
}

impl Condition {
    fn holds(&self, root: &Value) -> bool {
        match &self.test {
            Test::Value(t) => t.holds(root, &self.path),
            Test::Count { min, max, filter } => {
                let n = count(root, &self.path, filter);
                n >= u64::from(*min) && max.is_none_or(|m| n <= u64::from(m))
            }
        }
    }

    /// Why the condition does not hold on `root` (call only when it does not).
    fn why_not(&self, root: &Value) -> String {
        match &self.test {
            Test::Value(t) => {
                let mut seen = Vec::new();
                let mut more = 0usize;
                visit(root, &self.path, &mut |v| {
                    if seen.len() < 3 {
                        seen.push(v.to_string());
                    } else {
                        more += 1;
                    }
                    false
                });
                let found = match (seen.is_empty(), more) {
                    (true, _) => "none".to_string(),
                    (false, 0) => seen.join(", "),
                    (false, n) => format!("{} and {n} more", seen.join(", ")),
                };
                format!("{}: wanted {}, found {found}", self.key, t.describe())
            }
            Test::Count { min, max, filter } => {
                let n = count(root, &self.path, filter);
                let wanted = match max {
                    Some(m) if m == min => format!("exactly {min}"),
                    Some(m) => format!("{min} to {m}"),
                    None => format!("at least {min}"),
                };
                let which = if filter.is_empty() {
                    ""
                } else {
                    " matching where"
                };
                format!("{}: {n}{which} counted, wanted {wanted}", self.key)
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Rule {
    name: String,
    conditions: Vec<Condition>,
}

/// A compiled rule set: evaluate it as often as needed.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

/// The outcome of evaluating a rule set against one inventory, with the explanation an Event
/// carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evaluation {
    /// The named rule (the first that matched) matched.
    Matched {
        /// The rule's `name`, or `rules[<index>]`.
        rule: String,
    },
    /// No rule matched; one reason per rule (`<rule>: <first failing condition>`).
    NoMatch {
        /// Why each rule did not match, in rule order.
        reasons: Vec<String>,
    },
}

impl RuleSet {
    /// The index of the first rule that matches the inventory `attributes`, if any.
    pub fn first_match(&self, attributes: &Value) -> Option<usize> {
        self.rules
            .iter()
            .position(|r| r.conditions.iter().all(|c| c.holds(attributes)))
    }

    /// Evaluates with an explanation (for Events; slower than [`RuleSet::first_match`] only
    /// when nothing matches).
    pub fn evaluate(&self, attributes: &Value) -> Evaluation {
        if let Some(i) = self.first_match(attributes) {
            return Evaluation::Matched {
                rule: self.rules[i].name.clone(),
            };
        }
        let reasons = self
            .rules
            .iter()
            .map(|r| {
                let failing = r
                    .conditions
                    .iter()
                    .find(|c| !c.holds(attributes))
                    .map(|c| c.why_not(attributes))
                    .unwrap_or_else(|| "did not match".into());
                format!("{}: {failing}", r.name)
            })
            .collect();
        Evaluation::NoMatch { reasons }
    }

    /// The name of rule `index` (`rules[<index>]` when it has none).
    pub fn rule_name(&self, index: usize) -> Option<&str> {
        self.rules.get(index).map(|r| r.name.as_str())
    }

    /// How many rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules (never, for a compiled spec).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

impl fmt::Display for Evaluation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Evaluation::Matched { rule } => write!(f, "rule {rule} matched"),
            Evaluation::NoMatch { reasons } => {
                write!(f, "no rule matched ({})", reasons.join("; "))
            }
        }
    }
}

/// Compiles a rule set's spec; every problem is returned, each naming its field path under
/// `spec.rules`.
pub fn compile(spec: &WorkflowRuleSetSpec) -> Result<RuleSet, Vec<PatternError>> {
    let mut errors = Vec::new();
    if spec.rules.is_empty() {
        errors.push(PatternError::new(
            "spec.rules",
            "at least one rule is required",
        ));
    }
    let mut names = HashSet::new();
    let mut rules = Vec::with_capacity(spec.rules.len());
    for (i, rule) in spec.rules.iter().enumerate() {
        let at = format!("spec.rules[{i}]");
        let name = match &rule.name {
            Some(n) if n.is_empty() => {
                errors.push(PatternError::new(
                    format!("{at}.name"),
                    "must not be empty (leave it out for rules[<index>])",
                ));
                format!("rules[{i}]")
            }
            Some(n) => n.clone(),
            None => format!("rules[{i}]"),
        };
        if !names.insert(name.clone()) {
            errors.push(PatternError::new(
                format!("{at}.name"),
                format!("duplicate rule name {name:?}"),
            ));
        }
        if rule.match_.is_empty() {
            errors.push(PatternError::new(
                format!("{at}.match"),
                "at least one attribute pattern is required (a rule matching every machine must say so, e.g. `collectionMethod: {exists: true}`)",
            ));
        }
        let mut conditions = Vec::with_capacity(rule.match_.len());
        for (key, pattern) in &rule.match_ {
            let at = format!("{at}.match.{key}");
            let Some(path) = check_path(key, &at, None, &mut errors) else {
                continue;
            };
            if let Some(test) = compile_field(pattern, key, &at, &mut errors) {
                conditions.push(Condition {
                    key: key.clone(),
                    path,
                    test,
                });
            }
        }
        rules.push(Rule { name, conditions });
    }
    if errors.is_empty() {
        Ok(RuleSet { rules })
    } else {
        Err(errors)
    }
}

/// Splits and checks an attribute path; `base` is the list path a `where` key is relative to.
fn check_path(
    key: &str,
    at: &str,
    base: Option<&str>,
    errors: &mut Vec<PatternError>,
) -> Option<Vec<String>> {
    let segments: Vec<&str> = key.split('.').collect();
    if segments
        .iter()
        .any(|s| s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        errors.push(PatternError::new(
            at,
            format!(
                "{key:?} is not an attribute path: dotted camelCase field names such as chassis.vendor or blockDevices.sizeBytes"
            ),
        ));
        return None;
    }
    let full = match base {
        Some(b) => format!("{b}.{key}"),
        None => key.to_string(),
    };
    if !KNOWN_PATHS.contains(&full.as_str()) {
        let hint = match base {
            Some(b) => {
                let prefix = format!("{b}.");
                let fields: Vec<&str> = KNOWN_PATHS
                    .iter()
                    .filter_map(|p| p.strip_prefix(prefix.as_str()))
                    .collect();
                format!("the elements of {b} have: {}", fields.join(", "))
            }
            None => {
                let top: Vec<&str> = KNOWN_PATHS
                    .iter()
                    .filter(|p| !p.contains('.'))
                    .copied()
                    .collect();
                format!("the inventory's top-level fields are: {}", top.join(", "))
            }
        };
        errors.push(PatternError::new(
            at,
            format!("unknown attribute path {full:?}; {hint}"),
        ));
        return None;
    }
    Some(segments.into_iter().map(String::from).collect())
}

fn compile_field(
    p: &FieldPattern,
    key: &str,
    at: &str,
    errors: &mut Vec<PatternError>,
) -> Option<Test> {
    let value = ValuePattern {
        equals: p.equals.clone(),
        one_of: p.one_of.clone(),
        prefix: p.prefix.clone(),
        min: p.min,
        max: p.max,
        exists: p.exists,
    };
    let has_value = value != ValuePattern::default();
    if p.count.is_none() && p.where_.is_empty() {
        return compile_value(&value, at, errors).map(Test::Value);
    }
    if has_value {
        let field = if p.count.is_some() { "count" } else { "where" };
        errors.push(PatternError::new(
            format!("{at}.{field}"),
            "count/where cannot be combined with equals, oneOf, prefix, min, max or exists: write the value conditions inside where",
        ));
        return None;
    }
    let range = p.count.unwrap_or(CountRange {
        min: Some(1),
        max: None,
    });
    let min = range.min.unwrap_or(0);
    let mut ok = true;
    if let Some(max) = range.max
        && min > max
    {
        errors.push(PatternError::new(
            format!("{at}.count.min"),
            format!("min {min} is above max {max}: no count can satisfy it"),
        ));
        ok = false;
    }
    if range.min.is_none() && range.max.is_none() {
        errors.push(PatternError::new(
            format!("{at}.count"),
            "give min, max or both",
        ));
        ok = false;
    }
    let mut filter = Vec::with_capacity(p.where_.len());
    for (wkey, wpattern) in &p.where_ {
        let wat = format!("{at}.where.{wkey}");
        let Some(path) = check_path(wkey, &wat, Some(key), errors) else {
            ok = false;
            continue;
        };
        match compile_value(wpattern, &wat, errors) {
            Some(t) => filter.push((path, t)),
            None => ok = false,
        }
    }
    ok.then_some(Test::Count {
        min,
        max: range.max,
        filter,
    })
}

fn compile_value(p: &ValuePattern, at: &str, errors: &mut Vec<PatternError>) -> Option<ValueTest> {
    let before = errors.len();
    let conditions = p.equals.is_some()
        || !p.one_of.is_empty()
        || p.prefix.is_some()
        || p.min.is_some()
        || p.max.is_some();
    match p.exists {
        None if !conditions => errors.push(PatternError::new(
            at,
            "no condition: give equals, oneOf, prefix, min, max, exists or count",
        )),
        Some(false) if conditions => errors.push(PatternError::new(
            format!("{at}.exists"),
            "exists: false cannot be combined with a value condition (a missing value satisfies none)",
        )),
        _ => {}
    }
    if p.prefix.as_deref() == Some("") {
        errors.push(PatternError::new(
            format!("{at}.prefix"),
            "must not be empty (use exists: true for any value)",
        ));
    }
    if let (Some(min), Some(max)) = (p.min, p.max)
        && min > max
    {
        errors.push(PatternError::new(
            format!("{at}.min"),
            format!("min {min} is above max {max}: no value can satisfy it"),
        ));
    }
    if let (Some(e), false) = (&p.equals, p.one_of.is_empty())
        && !p.one_of.contains(e)
    {
        errors.push(PatternError::new(
            format!("{at}.oneOf"),
            format!("equals {e:?} is not among oneOf: no value can satisfy both"),
        ));
    }
    (errors.len() == before).then(|| ValueTest {
        equals: p.equals.clone(),
        one_of: p.one_of.clone(),
        prefix: p.prefix.clone(),
        min: p.min,
        max: p.max,
        absent: p.exists == Some(false),
    })
}

/// Whether a leaf's text equals `want`: strings as they are, numbers and booleans in their
/// JSON spelling; objects and lists never.
fn text_eq(v: &Value, want: &str) -> bool {
    match v {
        Value::String(s) => s == want,
        Value::Bool(b) => want == if *b { "true" } else { "false" },
        Value::Number(n) => {
            if let (Some(a), Ok(b)) = (n.as_i64(), want.parse::<i64>()) {
                a == b
            } else if let (Some(a), Ok(b)) = (n.as_u64(), want.parse::<u64>()) {
                a == b
            } else {
                n.to_string() == want
            }
        }
        _ => false,
    }
}

/// A number leaf compared with `bound`; `None` for anything else.
fn cmp_num(v: &Value, bound: i64) -> Option<Ordering> {
    let Value::Number(n) = v else { return None };
    if let Some(i) = n.as_i64() {
        Some(i.cmp(&bound))
    } else if n.as_u64().is_some() {
        // Above i64::MAX: greater than any bound.
        Some(Ordering::Greater)
    } else {
        n.as_f64().and_then(|f| f.partial_cmp(&(bound as f64)))
    }
}

/// Calls `f` on every leaf `path` reaches under `v` (lists entered element by element, `null`
/// skipped) until it returns `true`; returns whether it did.
fn visit<'a>(v: &'a Value, path: &[String], f: &mut impl FnMut(&'a Value) -> bool) -> bool {
    match v {
        Value::Null => false,
        Value::Array(items) => items.iter().any(|item| visit(item, path, f)),
        Value::Object(map) => match path.split_first() {
            Some((head, rest)) => map.get(head).is_some_and(|child| visit(child, rest, f)),
            None => f(v),
        },
        _ => path.is_empty() && f(v),
    }
}

fn any_leaf(v: &Value, path: &[String]) -> bool {
    visit(v, path, &mut |_| true)
}

/// How many leaves `path` reaches under `root` that satisfy every `filter` entry.
fn count(root: &Value, path: &[String], filter: &[(Vec<String>, ValueTest)]) -> u64 {
    let mut n = 0u64;
    visit(root, path, &mut |leaf| {
        if filter.iter().all(|(p, t)| t.holds(leaf, p)) {
            n += 1;
        }
        false
    });
    n
}

#[cfg(test)]
mod tests;
