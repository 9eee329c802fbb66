//! The dynamic values a template works on, modelled on the Go values `text/template` sees when
//! its data was decoded from JSON or YAML into `interface{}`.
//!
//! Numbers: a JSON number that is an integer (fits `i64`) becomes [`Value::Int`] (Go `int`) and
//! prints as digits (`1000000`); any other number becomes [`Value::Float`] (Go `float64`) and
//! prints as Go's `%v` prints a `float64` (`1.5`, `1e+21`, and `1` for a float that happens to
//! be integral, e.g. the result of `float64 1`). This matches what Go gives for data decoded with
//! `yaml.v3` or `json.Decoder.UseNumber`; it avoids the `1e+06` surprise of plain `float64`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// A shared, mutable map: Go maps are references, so Sprig's `set` on a map held in a variable
/// is visible through every other holder of that map.
pub type MapRef = Rc<RefCell<BTreeMap<String, Value>>>;

/// A template value.
#[derive(Clone, Debug)]
pub enum Value {
    /// Go's invalid `reflect.Value`: a missing map key or an absent pipeline. Prints `<no value>`.
    Missing,
    /// A nil interface (JSON `null`). Prints `<no value>` at the top of an action, `<nil>` inside
    /// a collection or through `print`.
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    List(Rc<Vec<Value>>),
    Map(MapRef),
}

impl Value {
    pub fn str(s: impl Into<Rc<str>>) -> Value {
        Value::Str(s.into())
    }

    pub fn list(v: Vec<Value>) -> Value {
        Value::List(Rc::new(v))
    }

    pub fn map(m: BTreeMap<String, Value>) -> Value {
        Value::Map(Rc::new(RefCell::new(m)))
    }

    pub fn is_nilish(&self) -> bool {
        matches!(self, Value::Missing | Value::Nil)
    }

    /// Go's `text/template` truth: false, 0, nil and empty strings, lists and maps are false.
    pub fn truth(&self) -> bool {
        match self {
            Value::Missing | Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.borrow().is_empty(),
        }
    }

    /// The Go type name, as `%T` and error messages print it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Missing | Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "[]interface {}",
            Value::Map(_) => "map[string]interface {}",
        }
    }

    /// The Go `reflect.Kind` name, as Sprig's `kindOf` prints it.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Value::Missing | Value::Nil => "invalid",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "slice",
            Value::Map(_) => "map",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Converts JSON data (the render input) into a template value.
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Value::Int(i)
                } else {
                    Value::Float(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            serde_json::Value::String(s) => Value::str(s.as_str()),
            serde_json::Value::Array(a) => Value::list(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => Value::map(
                o.iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// A deep copy: lists and maps are copied, so later `set`s do not reach the original.
    pub fn deep_copy(&self, depth: usize) -> Value {
        if depth > MAX_VALUE_DEPTH {
            return Value::Nil;
        }
        match self {
            Value::List(l) => Value::list(l.iter().map(|v| v.deep_copy(depth + 1)).collect()),
            Value::Map(m) => Value::map(
                m.borrow()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.deep_copy(depth + 1)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Go's `reflect.DeepEqual` on values decoded into `interface{}`.
    pub fn deep_equal(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Missing | Value::Nil, Value::Missing | Value::Nil) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a == b,
            (Value::Str(a), Value::Str(b)) => a == b,
            (Value::List(a), Value::List(b)) => {
                Rc::ptr_eq(a, b)
                    || (a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.deep_equal(y)))
            }
            (Value::Map(a), Value::Map(b)) => {
                if Rc::ptr_eq(a, b) {
                    return true;
                }
                let (a, b) = (a.borrow(), b.borrow());
                a.len() == b.len()
                    && a.iter()
                        .zip(b.iter())
                        .all(|((ka, va), (kb, vb))| ka == kb && va.deep_equal(vb))
            }
            _ => false,
        }
    }

    /// True when `self` holds (at any depth) the map `target`: storing it would make a cycle.
    pub fn contains_map(&self, target: &MapRef, depth: usize) -> bool {
        if depth > MAX_VALUE_DEPTH {
            return true;
        }
        match self {
            Value::Map(m) => {
                Rc::ptr_eq(m, target)
                    || m.borrow()
                        .values()
                        .any(|v| v.contains_map(target, depth + 1))
            }
            Value::List(l) => l.iter().any(|v| v.contains_map(target, depth + 1)),
            _ => false,
        }
    }

    /// Checks a function result: at most `max_nodes` list elements, map entries and string bytes
    /// in all (shared parts counted each time they appear, as printing would), and at most
    /// [`MAX_VALUE_DEPTH`] levels of nesting. Stops walking as soon as a limit is passed.
    pub fn check_bounds(&self, max_nodes: usize) -> Result<usize, BoundsError> {
        let mut seen = 0usize;
        self.walk_bounds(0, max_nodes, &mut seen)?;
        Ok(seen)
    }

    fn walk_bounds(&self, depth: usize, max: usize, seen: &mut usize) -> Result<(), BoundsError> {
        if depth > MAX_VALUE_DEPTH {
            return Err(BoundsError::TooDeep);
        }
        *seen += match self {
            Value::Str(s) => s.len(),
            _ => 1,
        };
        if *seen > max {
            return Err(BoundsError::TooLarge);
        }
        match self {
            Value::List(l) => {
                for v in l.iter() {
                    v.walk_bounds(depth + 1, max, seen)?;
                }
            }
            Value::Map(m) => {
                for (k, v) in m.borrow().iter() {
                    *seen += k.len();
                    v.walk_bounds(depth + 1, max, seen)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Why [`Value::check_bounds`] refused a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BoundsError {
    TooLarge,
    TooDeep,
}

/// The deepest nesting of lists and maps any conversion or printing walks into.
pub const MAX_VALUE_DEPTH: usize = 200;

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::str(s)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::str(s)
    }
}

impl From<Vec<String>> for Value {
    fn from(v: Vec<String>) -> Self {
        Value::list(v.into_iter().map(Value::from).collect())
    }
}
