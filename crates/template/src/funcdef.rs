//! One template function as the executor calls it: the Go signature it declares (parameter
//! types, variadic tail) and its implementation. Every function family (Go's built-ins, Sprig's,
//! Tinkerbell's) is written against these types; the table of them is built in `funcs`.

use crate::value::Value;
use std::collections::HashMap;

/// template literals converted) the way Go's `text/template` does for that Go type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `interface{}`: anything; a missing value becomes nil.
    Any,
    /// `reflect.Value` (the comparison built-ins): anything, a missing value stays missing.
    Reflect,
    Str,
    Int,
    Float,
    Bool,
    Map,
}

impl Ty {
    pub fn go_name(self) -> &'static str {
        match self {
            Ty::Any => "interface {}",
            Ty::Reflect => "reflect.Value",
            Ty::Str => "string",
            Ty::Int => "int",
            Ty::Float => "float64",
            Ty::Bool => "bool",
            Ty::Map => "map[string]interface {}",
        }
    }
}

/// Limits a function may need to respect while building its result.
pub struct FnCtx {
    pub max_bytes: usize,
}

impl FnCtx {
    /// Refuses to build a result of `n` bytes or items when that is past the output cap.
    pub fn check_size(&self, n: usize) -> Result<(), String> {
        if n > self.max_bytes {
            return Err(format!("result exceeds {} bytes", self.max_bytes));
        }
        Ok(())
    }
}

pub type FuncImpl = fn(&FnCtx, Vec<Value>) -> Result<Value, String>;

pub struct FuncDef {
    pub params: &'static [Ty],
    pub variadic: Option<Ty>,
    pub imp: FuncImpl,
    /// Go's built-ins (`and`, `or` short-circuit; `call` is special).
    pub builtin: bool,
}

pub(crate) type Table = HashMap<&'static str, FuncDef>;

/// Registers `name` (not as a Go built-in); its definition, for the built-ins to mark
/// ([`crate::builtins`]).
pub(crate) fn add<'t>(
    t: &'t mut Table,
    name: &'static str,
    params: &'static [Ty],
    variadic: Option<Ty>,
    imp: FuncImpl,
) -> &'t mut FuncDef {
    let def = FuncDef {
        params,
        variadic,
        imp,
        builtin: false,
    };
    t.entry(name).insert_entry(def).into_mut()
}
