//! The executor: Go `text/template/exec.go` semantics over [`Value`]s.

use crate::error::RenderError;
use crate::funcdef::{FnCtx, FuncDef, Ty};
use crate::funcs::lookup;
use crate::gofmt;
use crate::options::{MissingKey, RenderOptions};
use crate::parse::{Arg, Branch, Command, Node, Pipe, line_col};
use crate::value::{BoundsError, MAX_VALUE_DEPTH, Value};
use std::collections::BTreeMap;

#[derive(Clone, Copy)]
enum At<'t> {
    None,
    Node(&'t Node),
    Pipe(&'t Pipe),
    Cmd(&'t Command),
    Arg(&'t Arg),
}

impl At<'_> {
    fn pos(&self) -> usize {
        match self {
            At::None => 0,
            At::Node(n) => match n {
                Node::Text(_) => 0,
                Node::Action { pos, .. }
                | Node::Template { pos, .. }
                | Node::Break { pos }
                | Node::Continue { pos } => *pos,
                Node::If(b) | Node::Range(b) | Node::With(b) => b.pos,
            },
            At::Pipe(p) => p.pos,
            At::Cmd(c) => c.pos,
            At::Arg(a) => a.pos(),
        }
    }

    fn context(&self) -> String {
        let s = match self {
            At::None => String::new(),
            At::Node(n) => n.to_string(),
            At::Pipe(p) => p.to_string(),
            At::Cmd(c) => c.to_string(),
            At::Arg(a) => a.to_string(),
        };
        if s.chars().count() > 20 {
            let head: String = s.chars().take(20).collect();
            format!("{head}...")
        } else {
            s
        }
    }
}

enum Flow {
    Normal,
    Break,
    Continue,
}

type R<T> = Result<T, Box<RenderError>>;

/// The deepest recursion the executor allows (control structures, template calls and nested
/// pipelines together); sized so the worst case runs on a 2 MiB stack in a debug build.
pub const MAX_EXEC_NESTING: usize = 500;

pub(crate) struct Exec<'t> {
    pub name: &'t str,
    pub source: &'t str,
    pub trees: &'t BTreeMap<String, Vec<Node>>,
    pub opts: &'t RenderOptions,
    pub out: String,
    steps: u64,
    depth: usize,
    nest: usize,
    vars: Vec<(String, Value)>,
    executing: &'t str,
    at: At<'t>,
}

impl<'t> Exec<'t> {
    pub fn new(
        name: &'t str,
        executing: &'t str,
        source: &'t str,
        trees: &'t BTreeMap<String, Vec<Node>>,
        opts: &'t RenderOptions,
    ) -> Self {
        Exec {
            name,
            source,
            trees,
            opts,
            out: String::new(),
            steps: 0,
            depth: 0,
            nest: 0,
            vars: Vec::new(),
            executing,
            at: At::None,
        }
    }

    pub fn run(&mut self, data: Value) -> Result<(), RenderError> {
        self.run_inner(data).map_err(|e| *e)
    }

    fn run_inner(&mut self, data: Value) -> R<()> {
        let Some(root) = self.trees.get(self.executing) else {
            return Err(Box::new(RenderError::Exec {
                template: self.name.to_string(),
                line: 0,
                col: 0,
                executing: self.executing.to_string(),
                context: String::new(),
                message: format!(
                    "{} is an incomplete or empty template",
                    gofmt::quote(self.executing)
                ),
            }));
        };
        self.vars = vec![("$".to_string(), data.clone())];
        self.walk_list(&data, root)?;
        Ok(())
    }

    fn error<T>(&self, message: impl Into<String>) -> R<T> {
        let (line, col) = line_col(self.source, self.at.pos());
        Err(Box::new(RenderError::Exec {
            template: self.name.to_string(),
            line,
            col,
            executing: self.executing.to_string(),
            context: self.at.context(),
            message: message.into(),
        }))
    }

    fn step(&mut self, n: u64) -> R<()> {
        self.steps = self.steps.saturating_add(n);
        if self.steps > self.opts.max_steps {
            return Err(Box::new(RenderError::TooManySteps {
                template: self.name.to_string(),
                limit: self.opts.max_steps,
            }));
        }
        Ok(())
    }

    /// Counts one level of recursion (a control structure, a template call or a nested
    /// pipeline). Errors need no matching `leave`: they end the render.
    fn enter(&mut self) -> R<()> {
        self.nest += 1;
        if self.nest > MAX_EXEC_NESTING {
            return self.error(format!(
                "exceeded maximum nesting depth ({MAX_EXEC_NESTING})"
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.nest -= 1;
    }

    fn write(&mut self, s: &str) -> R<()> {
        if self.out.len() + s.len() > self.opts.max_output_bytes {
            return Err(Box::new(RenderError::OutputTooLarge {
                template: self.name.to_string(),
                limit: self.opts.max_output_bytes,
            }));
        }
        self.out.push_str(s);
        Ok(())
    }

    fn walk_list(&mut self, dot: &Value, list: &'t [Node]) -> R<Flow> {
        for n in list {
            match self.walk(dot, n)? {
                Flow::Normal => {}
                other => return Ok(other),
            }
        }
        Ok(Flow::Normal)
    }

    fn walk(&mut self, dot: &Value, node: &'t Node) -> R<Flow> {
        self.step(1)?;
        self.at = At::Node(node);
        match node {
            Node::Text(t) => self.write(t)?,
            Node::Action { pipe, .. } => {
                let v = self.eval_pipeline(dot, pipe)?;
                if pipe.decl.is_empty() {
                    self.at = At::Node(node);
                    let s = gofmt::format_action(&v);
                    self.write(&s)?;
                }
            }
            Node::If(b) | Node::With(b) | Node::Range(b) => {
                self.enter()?;
                let flow = match node {
                    Node::If(_) => self.walk_if_or_with(false, dot, b)?,
                    Node::With(_) => self.walk_if_or_with(true, dot, b)?,
                    _ => self.walk_range(dot, node, b)?,
                };
                self.leave();
                return Ok(flow);
            }
            Node::Template { name, pipe, .. } => {
                self.enter()?;
                self.walk_template(dot, node, name, pipe.as_ref())?;
                self.leave();
            }
            Node::Break { .. } => return Ok(Flow::Break),
            Node::Continue { .. } => return Ok(Flow::Continue),
        }
        Ok(Flow::Normal)
    }

    fn walk_if_or_with(&mut self, with: bool, dot: &Value, b: &'t Branch) -> R<Flow> {
        let mark = self.vars.len();
        let val = self.eval_pipeline(dot, &b.pipe)?;
        let flow = if val.truth() {
            if with {
                self.walk_list(&val, &b.list)?
            } else {
                self.walk_list(dot, &b.list)?
            }
        } else if let Some(e) = &b.else_list {
            self.walk_list(dot, e)?
        } else {
            Flow::Normal
        };
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn set_top_var(&mut self, n: usize, v: Value) {
        let len = self.vars.len();
        if n <= len {
            self.vars[len - n].1 = v;
        }
    }

    fn set_var(&mut self, name: &str, v: Value) -> R<()> {
        for (k, val) in self.vars.iter_mut().rev() {
            if k == name {
                *val = v;
                return Ok(());
            }
        }
        self.error(format!("undefined variable: {name}"))
    }

    fn one_iteration(&mut self, b: &'t Branch, mark: usize, index: Value, elem: Value) -> R<Flow> {
        self.step(1)?;
        let p = &b.pipe;
        if !p.decl.is_empty() {
            if p.is_assign {
                if p.decl.len() > 1 {
                    self.set_var(&p.decl[0], index.clone())?;
                } else {
                    self.set_var(&p.decl[0], elem.clone())?;
                }
            } else {
                self.set_top_var(1, elem.clone());
            }
        }
        if p.decl.len() > 1 {
            if p.is_assign {
                self.set_var(&p.decl[1], elem.clone())?;
            } else {
                self.set_top_var(2, index);
            }
        }
        let flow = self.walk_list(&elem, &b.list)?;
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn walk_range(&mut self, dot: &Value, node: &'t Node, b: &'t Branch) -> R<Flow> {
        self.at = At::Node(node);
        let outer = self.vars.len();
        let val = self.eval_pipeline(dot, &b.pipe)?;
        let mark = self.vars.len();
        let mut ran = false;
        match &val {
            Value::List(l) => {
                let items: Vec<Value> = l.iter().cloned().collect();
                for (i, e) in items.into_iter().enumerate() {
                    ran = true;
                    if let Flow::Break = self.one_iteration(b, mark, Value::Int(i as i64), e)? {
                        break;
                    }
                }
            }
            Value::Map(m) => {
                let items: Vec<(String, Value)> = m
                    .borrow()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                for (k, v) in items {
                    ran = true;
                    if let Flow::Break = self.one_iteration(b, mark, Value::str(k), v)? {
                        break;
                    }
                }
            }
            Value::Int(n) => {
                if b.pipe.decl.len() > 1 {
                    return self.error(format!(
                        "can't use {} to iterate over more than one variable",
                        gofmt::format_v(&val)
                    ));
                }
                for i in 0..(*n).max(0) {
                    ran = true;
                    if let Flow::Break =
                        self.one_iteration(b, mark, Value::Int(i), Value::Int(i))?
                    {
                        break;
                    }
                }
            }
            Value::Missing | Value::Nil => {}
            other => {
                return self.error(format!(
                    "range can't iterate over {}",
                    gofmt::format_v(other)
                ));
            }
        }
        if !ran && let Some(e) = &b.else_list {
            self.walk_list(dot, e)?;
        }
        self.vars.truncate(outer);
        Ok(Flow::Normal)
    }

    fn walk_template(
        &mut self,
        dot: &Value,
        node: &'t Node,
        name: &'t str,
        pipe: Option<&'t Pipe>,
    ) -> R<()> {
        self.at = At::Node(node);
        let Some(tree) = self.trees.get(name) else {
            return self.error(format!("template {} not defined", gofmt::quote(name)));
        };
        if self.depth >= self.opts.max_template_depth {
            return self.error(format!(
                "exceeded maximum template depth ({})",
                self.opts.max_template_depth
            ));
        }
        let new_dot = match pipe {
            Some(p) => self.eval_pipeline(dot, p)?,
            None => Value::Missing,
        };
        let saved_vars =
            std::mem::replace(&mut self.vars, vec![("$".to_string(), new_dot.clone())]);
        let saved_exec = std::mem::replace(&mut self.executing, name);
        self.depth += 1;
        let r = self.walk_list(&new_dot, tree);
        self.depth -= 1;
        self.executing = saved_exec;
        self.vars = saved_vars;
        r.map(|_| ())
    }

    fn eval_pipeline(&mut self, dot: &Value, pipe: &'t Pipe) -> R<Value> {
        self.at = At::Pipe(pipe);
        let mut value: Option<Value> = None;
        for cmd in &pipe.cmds {
            let v = self.eval_command(dot, cmd, value.take())?;
            // Go digs a nil interface down to an invalid value between commands.
            value = Some(if matches!(v, Value::Nil) {
                Value::Missing
            } else {
                v
            });
        }
        let value = value.unwrap_or(Value::Missing);
        for var in &pipe.decl {
            if pipe.is_assign {
                self.set_var(var, value.clone())?;
            } else {
                self.vars.push((var.clone(), value.clone()));
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &'t [Arg], final_: &Option<Value>) -> R<()> {
        if args.len() > 1 || final_.is_some() {
            return self.error(format!("can't give argument to non-function {}", args[0]));
        }
        Ok(())
    }

    fn eval_command(&mut self, dot: &Value, cmd: &'t Command, final_: Option<Value>) -> R<Value> {
        self.step(1)?;
        let first = &cmd.args[0];
        match first {
            Arg::Field { idents, .. } => {
                return self.eval_field_node(dot, first, idents, &cmd.args, final_);
            }
            Arg::Chain { node, fields, .. } => {
                return self.eval_chain_node(dot, first, node, fields, &cmd.args, final_);
            }
            Arg::Identifier { name, .. } => {
                return self.eval_function(dot, first, name, At::Cmd(cmd), &cmd.args, final_);
            }
            Arg::Pipe { pipe, .. } => {
                self.not_a_function(&cmd.args, &final_)?;
                self.enter()?;
                let v = self.eval_pipeline(dot, pipe)?;
                self.leave();
                return Ok(v);
            }
            Arg::Variable { idents, .. } => {
                return self.eval_variable_node(dot, first, idents, &cmd.args, final_);
            }
            _ => {}
        }
        self.at = At::Arg(first);
        self.not_a_function(&cmd.args, &final_)?;
        match first {
            Arg::Bool { val, .. } => Ok(Value::Bool(*val)),
            Arg::Dot { .. } => Ok(dot.clone()),
            Arg::Nil { .. } => self.error("nil is not a command"),
            Arg::Number { num, .. } => self.ideal_constant(num),
            Arg::String { text, .. } => Ok(Value::str(text.as_str())),
            other => self.error(format!(
                "can't evaluate command {}",
                gofmt::quote(&other.to_string())
            )),
        }
    }

    fn ideal_constant(&self, num: &crate::parse::Number) -> R<Value> {
        let is_hex_int = {
            let t = num.text.trim_start_matches(['+', '-']).to_ascii_lowercase();
            t.starts_with("0x") && !t.contains('p')
        };
        if !num.is_char
            && !is_hex_int
            && num.text.contains(['.', 'e', 'E', 'p', 'P'])
            && let Some(f) = num.float
        {
            return Ok(Value::Float(f));
        }
        match num.int {
            Some(i) => Ok(Value::Int(i)),
            None => self.error(format!("{} overflows int", num.text)),
        }
    }

    fn eval_field_node(
        &mut self,
        dot: &Value,
        node: &'t Arg,
        idents: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.at = At::Arg(node);
        self.eval_field_chain(dot.clone(), false, idents, args, final_)
    }

    fn eval_chain_node(
        &mut self,
        dot: &Value,
        node: &'t Arg,
        inner: &'t Arg,
        fields: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.at = At::Arg(node);
        if matches!(inner, Arg::Nil { .. }) {
            return self.error(format!("indirection through explicit nil in {node}"));
        }
        // Go evaluates the operand with no expected type: a missing value (nil data, a nil
        // interface dug out by the pipeline) stays missing, so `(.).foo` on nil data is
        // `<no value>` like `.foo`, not a nil-pointer error.
        let v = self.eval_arg(dot, Ty::Reflect, inner)?;
        self.at = At::Arg(node);
        self.eval_field_chain(v, false, fields, args, final_)
    }

    fn eval_variable_node(
        &mut self,
        _dot: &Value,
        node: &'t Arg,
        idents: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.at = At::Arg(node);
        let name = &idents[0];
        let value = match self.vars.iter().rev().find(|(k, _)| k == name) {
            Some((_, v)) => v.clone(),
            None => return self.error(format!("undefined variable: {name}")),
        };
        if idents.len() == 1 {
            if !args.is_empty() {
                self.not_a_function(args, &final_)?;
            }
            return Ok(value);
        }
        self.eval_field_chain(value, true, &idents[1..], args, final_)
    }

    fn eval_field_chain(
        &mut self,
        receiver: Value,
        from_var: bool,
        idents: &'t [String],
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        let n = idents.len();
        let mut recv = receiver;
        let mut interface_typed = from_var;
        for ident in &idents[..n - 1] {
            recv = self.eval_field(ident, &[], &None, recv, interface_typed)?;
            interface_typed = true;
        }
        self.eval_field(&idents[n - 1], args, &final_, recv, interface_typed)
    }

    fn eval_field(
        &mut self,
        name: &str,
        args: &'t [Arg],
        final_: &Option<Value>,
        receiver: Value,
        interface_typed: bool,
    ) -> R<Value> {
        match receiver {
            Value::Missing => {
                if self.opts.missing_key == MissingKey::Error {
                    return self
                        .error(format!("nil data; no entry for key {}", gofmt::quote(name)));
                }
                Ok(Value::Missing)
            }
            Value::Nil => self.error(format!("nil pointer evaluating interface {{}}.{name}")),
            Value::Map(m) => {
                if args.len() > 1 || final_.is_some() {
                    return self.error(format!("{name} is not a method but has arguments"));
                }
                let found = m.borrow().get(name).cloned();
                match found {
                    Some(v) => Ok(v),
                    None => match self.opts.missing_key {
                        MissingKey::Default => Ok(Value::Missing),
                        MissingKey::Zero => Ok(Value::Nil),
                        MissingKey::Error => {
                            self.error(format!("map has no entry for key {}", gofmt::quote(name)))
                        }
                    },
                }
            }
            other => {
                let ty = if interface_typed {
                    "interface {}"
                } else {
                    other.type_name()
                };
                self.error(format!("can't evaluate field {name} in type {ty}"))
            }
        }
    }

    fn eval_function(
        &mut self,
        dot: &Value,
        ident: &'t Arg,
        name: &'t str,
        call_node: At<'t>,
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        self.at = At::Arg(ident);
        let Some(f) = lookup(name) else {
            return self.error(format!("{} is not a defined function", gofmt::quote(name)));
        };
        self.eval_call(dot, f, call_node, name, args, final_)
    }

    fn eval_call(
        &mut self,
        dot: &Value,
        f: &'static FuncDef,
        node: At<'t>,
        name: &str,
        args: &'t [Arg],
        final_: Option<Value>,
    ) -> R<Value> {
        let args: &'t [Arg] = if args.is_empty() { args } else { &args[1..] };
        let num_in = args.len() + usize::from(final_.is_some());
        let fixed = f.params.len();
        if f.variadic.is_some() {
            if num_in < fixed {
                return self.error(format!(
                    "wrong number of args for {name}: want at least {fixed} got {}",
                    args.len()
                ));
            }
        } else if num_in != fixed {
            return self.error(format!(
                "wrong number of args for {name}: want {fixed} got {num_in}"
            ));
        }
        if f.builtin && (name == "and" || name == "or") {
            let want = name == "or";
            let mut v = Value::Missing;
            for a in args {
                v = self.eval_arg(dot, Ty::Reflect, a)?;
                if v.truth() == want {
                    return Ok(v);
                }
            }
            if let Some(fv) = final_ {
                v = fv;
            }
            return Ok(v);
        }
        let mut argv = Vec::with_capacity(num_in);
        for (i, a) in args.iter().enumerate() {
            let ty = if i < fixed {
                f.params[i]
            } else {
                f.variadic.unwrap_or(Ty::Any)
            };
            argv.push(self.eval_arg(dot, ty, a)?);
        }
        if let Some(fv) = final_ {
            let ty = match f.variadic {
                Some(vt) => {
                    if num_in - 1 < fixed {
                        f.params[num_in - 1]
                    } else {
                        vt
                    }
                }
                None => f.params[fixed - 1],
            };
            argv.push(self.validate(fv, ty)?);
        }
        if f.builtin && name == "call" {
            self.at = node;
            let callee = args.first().map(|a| a.to_string()).unwrap_or_default();
            return match argv.first() {
                None | Some(Value::Missing | Value::Nil) => {
                    self.error("error calling call: call of nil")
                }
                Some(v) => self.error(format!(
                    "error calling call: non-function {callee} of type {}",
                    v.type_name()
                )),
            };
        }
        let ctx = FnCtx {
            max_bytes: self.opts.max_output_bytes,
        };
        match (f.imp)(&ctx, argv) {
            Ok(v) => {
                match v.check_bounds(self.opts.max_output_bytes) {
                    Ok(size) => self.step(1 + (size / 64) as u64)?,
                    Err(e) => {
                        self.at = node;
                        return self.error(match e {
                            BoundsError::TooLarge => format!(
                                "error calling {name}: result exceeds {} bytes",
                                self.opts.max_output_bytes
                            ),
                            BoundsError::TooDeep => format!(
                                "error calling {name}: result nested deeper than {MAX_VALUE_DEPTH} levels"
                            ),
                        });
                    }
                }
                Ok(v)
            }
            Err(msg) => {
                self.at = node;
                self.error(format!("error calling {name}: {msg}"))
            }
        }
    }

    fn validate(&self, v: Value, ty: Ty) -> R<Value> {
        let ok = match (&v, ty) {
            (_, Ty::Reflect) => return Ok(v),
            (Value::Missing, Ty::Any) => return Ok(Value::Nil),
            (_, Ty::Any) => return Ok(v),
            (Value::Missing | Value::Nil, Ty::Map) => return Ok(Value::map(BTreeMap::new())),
            (Value::Missing | Value::Nil, _) => {
                return self.error(format!("invalid value; expected {}", ty.go_name()));
            }
            (Value::Str(_), Ty::Str) => true,
            (Value::Int(_), Ty::Int) => true,
            (Value::Float(_), Ty::Float) => true,
            (Value::Bool(_), Ty::Bool) => true,
            (Value::Map(_), Ty::Map) => true,
            _ => false,
        };
        if ok {
            Ok(v)
        } else {
            self.error(format!(
                "wrong type for value; expected {}; got {}",
                ty.go_name(),
                v.type_name()
            ))
        }
    }

    fn eval_arg(&mut self, dot: &Value, ty: Ty, arg: &'t Arg) -> R<Value> {
        self.at = At::Arg(arg);
        match arg {
            Arg::Dot { .. } => return self.validate(dot.clone(), ty),
            Arg::Nil { .. } => {
                return match ty {
                    Ty::Any | Ty::Map => Ok(Value::Nil),
                    _ => self.error(format!("cannot assign nil to {}", ty.go_name())),
                };
            }
            Arg::Field { idents, .. } => {
                let v = self.eval_field_node(dot, arg, idents, std::slice::from_ref(arg), None)?;
                self.at = At::Arg(arg);
                return self.validate(v, ty);
            }
            Arg::Variable { idents, .. } => {
                let v = self.eval_variable_node(dot, arg, idents, &[], None)?;
                self.at = At::Arg(arg);
                return self.validate(v, ty);
            }
            Arg::Pipe { pipe, .. } => {
                self.enter()?;
                let v = self.eval_pipeline(dot, pipe)?;
                self.leave();
                self.at = At::Arg(arg);
                return self.validate(v, ty);
            }
            Arg::Identifier { name, .. } => {
                let v = self.eval_function(dot, arg, name, At::Arg(arg), &[], None)?;
                self.at = At::Arg(arg);
                return self.validate(v, ty);
            }
            Arg::Chain { node, fields, .. } => {
                let v = self.eval_chain_node(dot, arg, node, fields, &[], None)?;
                self.at = At::Arg(arg);
                return self.validate(v, ty);
            }
            _ => {}
        }
        match ty {
            Ty::Bool => match arg {
                Arg::Bool { val, .. } => Ok(Value::Bool(*val)),
                _ => self.error(format!("expected bool; found {arg}")),
            },
            Ty::Float => match arg {
                Arg::Number { num, .. } if num.float.is_some() && !num.is_char => {
                    Ok(Value::Float(num.float.unwrap_or(0.0)))
                }
                Arg::Number { num, .. } if num.is_char => {
                    Ok(Value::Float(num.float.unwrap_or(0.0)))
                }
                _ => self.error(format!("expected float; found {arg}")),
            },
            Ty::Int => match arg {
                Arg::Number { num, .. } if num.int.is_some() => {
                    Ok(Value::Int(num.int.unwrap_or(0)))
                }
                _ => self.error(format!("expected integer; found {arg}")),
            },
            Ty::Str => match arg {
                Arg::String { text, .. } => Ok(Value::str(text.as_str())),
                _ => self.error(format!("expected string; found {arg}")),
            },
            Ty::Any | Ty::Reflect => match arg {
                Arg::Bool { val, .. } => Ok(Value::Bool(*val)),
                Arg::Number { num, .. } => self.ideal_constant(num),
                Arg::String { text, .. } => Ok(Value::str(text.as_str())),
                _ => self.error(format!("can't handle {arg} for arg of type interface {{}}")),
            },
            Ty::Map => self.error(format!(
                "can't handle {arg} for arg of type {}",
                ty.go_name()
            )),
        }
    }
}
