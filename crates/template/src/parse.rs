//! The parser: Go `text/template/parse` semantics, building one tree per template (the main
//! template plus every `define` and `block`).

use crate::lex::{Kind, Token, lex};
use std::collections::BTreeMap;
use std::fmt;

/// The deepest nesting of control structures and parenthesised pipelines a template may use.
pub const MAX_PARSE_DEPTH: usize = 100;

#[derive(Clone, Debug)]
pub enum Node {
    Text(String),
    Action {
        pos: usize,
        pipe: Pipe,
    },
    If(Branch),
    Range(Branch),
    With(Branch),
    Template {
        pos: usize,
        name: String,
        pipe: Option<Pipe>,
    },
    Break {
        pos: usize,
    },
    Continue {
        pos: usize,
    },
}

#[derive(Clone, Debug)]
pub struct Branch {
    pub pos: usize,
    pub pipe: Pipe,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
}

#[derive(Clone, Debug)]
pub struct Pipe {
    pub pos: usize,
    pub is_assign: bool,
    pub decl: Vec<String>,
    pub cmds: Vec<Command>,
}

#[derive(Clone, Debug)]
pub struct Command {
    pub pos: usize,
    pub args: Vec<Arg>,
}

#[derive(Clone, Debug)]
pub struct Number {
    pub text: String,
    pub int: Option<i64>,
    pub float: Option<f64>,
    /// A character constant such as `'a'` (an integer, never a float, when used as a value).
    pub is_char: bool,
}

#[derive(Clone, Debug)]
pub enum Arg {
    Field {
        pos: usize,
        idents: Vec<String>,
    },
    /// `$x.a.b`: `idents[0]` is the variable name including `$`.
    Variable {
        pos: usize,
        idents: Vec<String>,
    },
    Chain {
        pos: usize,
        node: Box<Arg>,
        fields: Vec<String>,
    },
    Identifier {
        pos: usize,
        name: String,
    },
    Dot {
        pos: usize,
    },
    Nil {
        pos: usize,
    },
    Bool {
        pos: usize,
        val: bool,
    },
    Number {
        pos: usize,
        num: Number,
    },
    String {
        pos: usize,
        quoted: String,
        text: String,
    },
    Pipe {
        pos: usize,
        pipe: Box<Pipe>,
    },
}

impl Arg {
    pub fn pos(&self) -> usize {
        match self {
            Arg::Field { pos, .. }
            | Arg::Variable { pos, .. }
            | Arg::Chain { pos, .. }
            | Arg::Identifier { pos, .. }
            | Arg::Dot { pos }
            | Arg::Nil { pos }
            | Arg::Bool { pos, .. }
            | Arg::Number { pos, .. }
            | Arg::String { pos, .. }
            | Arg::Pipe { pos, .. } => *pos,
        }
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Field { idents, .. } => {
                for i in idents {
                    write!(f, ".{i}")?;
                }
                Ok(())
            }
            Arg::Variable { idents, .. } => write!(f, "{}", idents.join(".")),
            Arg::Chain { node, fields, .. } => {
                if matches!(**node, Arg::Pipe { .. }) {
                    write!(f, "({node})")?;
                } else {
                    write!(f, "{node}")?;
                }
                for i in fields {
                    write!(f, ".{i}")?;
                }
                Ok(())
            }
            Arg::Identifier { name, .. } => write!(f, "{name}"),
            Arg::Dot { .. } => write!(f, "."),
            Arg::Nil { .. } => write!(f, "nil"),
            Arg::Bool { val, .. } => write!(f, "{val}"),
            Arg::Number { num, .. } => write!(f, "{}", num.text),
            Arg::String { quoted, .. } => write!(f, "{quoted}"),
            Arg::Pipe { pipe, .. } => write!(f, "{pipe}"),
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                write!(f, " ")?;
            }
            if matches!(a, Arg::Pipe { .. }) {
                write!(f, "({a})")?;
            } else {
                write!(f, "{a}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.decl.is_empty() {
            write!(f, "{}", self.decl.join(", "))?;
            write!(f, "{}", if self.is_assign { " = " } else { " := " })?;
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                write!(f, " | ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, list: &[Node]) -> fmt::Result {
    for n in list {
        write!(f, "{n}")?;
    }
    Ok(())
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Text(t) => write!(f, "{}", crate::gofmt::quote(t)),
            Node::Action { pipe, .. } => write!(f, "{{{{{pipe}}}}}"),
            Node::If(b) | Node::Range(b) | Node::With(b) => {
                let kw = match self {
                    Node::If(_) => "if",
                    Node::Range(_) => "range",
                    _ => "with",
                };
                write!(f, "{{{{{kw} {}}}}}", b.pipe)?;
                write_list(f, &b.list)?;
                if let Some(e) = &b.else_list {
                    write!(f, "{{{{else}}}}")?;
                    write_list(f, e)?;
                }
                write!(f, "{{{{end}}}}")
            }
            Node::Template { name, pipe, .. } => match pipe {
                Some(p) => write!(f, "{{{{template {} {p}}}}}", crate::gofmt::quote(name)),
                None => write!(f, "{{{{template {}}}}}", crate::gofmt::quote(name)),
            },
            Node::Break { .. } => write!(f, "{{{{break}}}}"),
            Node::Continue { .. } => write!(f, "{{{{continue}}}}"),
        }
    }
}

/// A template failed to parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("template: {name}:{line}:{col}: {message}")]
pub struct ParseError {
    /// The name the template was parsed under.
    pub name: String,
    /// 1-based line.
    pub line: usize,
    /// 0-based byte offset within the line, as Go's error context counts it.
    pub col: usize,
    pub message: String,
}

/// Line (1-based) and column (0-based byte offset in the line) of a byte position.
pub fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(text.len());
    let before = &text.as_bytes()[..pos];
    let line = 1 + before.iter().filter(|b| **b == b'\n').count();
    let col = match before.iter().rposition(|b| *b == b'\n') {
        Some(nl) => pos - nl - 1,
        None => pos,
    };
    (line, col)
}

/// The parse result: every named tree.
pub struct Parsed {
    pub trees: BTreeMap<String, Vec<Node>>,
}

struct Parser<'a> {
    name: String,
    text: &'a str,
    tokens: Vec<Token>,
    idx: usize,
    last: usize,
    vars: Vec<String>,
    range_depth: usize,
    action_line: usize,
    depth: usize,
    has_func: &'a dyn Fn(&str) -> bool,
    trees: BTreeMap<String, Vec<Node>>,
}

type PResult<T> = Result<T, ParseError>;

/// Parses `text` as the template `name`; `has_func` tells which function names exist.
pub fn parse(name: &str, text: &str, has_func: &dyn Fn(&str) -> bool) -> PResult<Parsed> {
    let mut p = Parser {
        name: name.to_string(),
        text,
        tokens: lex(text),
        idx: 0,
        last: 0,
        vars: vec!["$".to_string()],
        range_depth: 0,
        action_line: 0,
        depth: 0,
        has_func,
        trees: BTreeMap::new(),
    };
    let root = p.parse_top()?;
    p.add_tree(name.to_string(), root)?;
    Ok(Parsed { trees: p.trees })
}

/// Go's `IsEmptyTree`: only whitespace text.
fn is_empty_tree(list: &[Node]) -> bool {
    list.iter().all(|n| match n {
        Node::Text(t) => t.trim_matches([' ', '\t', '\r', '\n']).is_empty(),
        _ => false,
    })
}

enum ListEnd {
    End,
    Else { pos: usize },
}

impl<'a> Parser<'a> {
    fn tok(&self, i: usize) -> &Token {
        let last = self.tokens.len() - 1;
        &self.tokens[i.min(last)]
    }

    fn next(&mut self) -> Token {
        let t = self.tok(self.idx).clone();
        self.last = self.idx.min(self.tokens.len() - 1);
        if self.idx < self.tokens.len() - 1 {
            self.idx += 1;
        } else {
            // stay on the final EOF/error token, but keep backup() symmetric
            self.idx = self.tokens.len();
        }
        t
    }

    fn backup(&mut self) {
        if self.idx > 0 {
            self.idx -= 1;
        }
    }

    fn peek(&self) -> Token {
        self.tok(self.idx).clone()
    }

    fn next_non_space(&mut self) -> Token {
        loop {
            let t = self.next();
            if t.kind != Kind::Space {
                return t;
            }
        }
    }

    fn peek_non_space(&mut self) -> Token {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn err<T>(&self, msg: impl Into<String>) -> PResult<T> {
        let pos = self.tok(self.last).pos;
        let (line, col) = line_col(self.text, pos);
        Err(ParseError {
            name: self.name.clone(),
            line,
            col,
            message: msg.into(),
        })
    }

    fn err_at<T>(&self, pos: usize, msg: impl Into<String>) -> PResult<T> {
        let (line, col) = line_col(self.text, pos);
        Err(ParseError {
            name: self.name.clone(),
            line,
            col,
            message: msg.into(),
        })
    }

    fn unexpected<T>(&self, tok: &Token, context: &str) -> PResult<T> {
        if tok.kind == Kind::Error {
            let mut extra = String::new();
            if self.action_line != 0 && self.action_line != tok.line {
                extra = format!(" in action started at {}:{}", self.name, self.action_line);
                if tok.val.ends_with(" action") {
                    extra = extra[" in action".len()..].to_string();
                }
            }
            return self.err_at(tok.pos, format!("{tok}{extra}"));
        }
        self.err_at(tok.pos, format!("unexpected {tok} in {context}"))
    }

    fn expect(&mut self, kind: Kind, context: &str) -> PResult<Token> {
        let t = self.next_non_space();
        if t.kind != kind {
            return self.unexpected(&t, context);
        }
        Ok(t)
    }

    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_PARSE_DEPTH {
            return self.err(format!("max nesting depth {MAX_PARSE_DEPTH} exceeded"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn add_tree(&mut self, name: String, root: Vec<Node>) -> PResult<()> {
        match self.trees.get(&name) {
            Some(existing) if !is_empty_tree(existing) => {
                if !is_empty_tree(&root) {
                    return self.err(format!(
                        "template: multiple definition of template {}",
                        crate::gofmt::quote(&name)
                    ));
                }
                Ok(())
            }
            _ => {
                self.trees.insert(name, root);
                Ok(())
            }
        }
    }

    fn parse_top(&mut self) -> PResult<Vec<Node>> {
        let mut root = Vec::new();
        while self.peek().kind != Kind::Eof {
            if self.peek().kind == Kind::LeftDelim {
                let save = self.idx;
                self.next();
                if self.next_non_space().kind == Kind::Define {
                    self.parse_definition()?;
                    continue;
                }
                self.idx = save;
            }
            match self.text_or_action()? {
                Item::Node(n) => root.push(n),
                Item::End(pos) => return self.err_at(pos, "unexpected {{end}}"),
                Item::Else(pos) => return self.err_at(pos, "unexpected {{else}}"),
            }
        }
        Ok(root)
    }

    fn parse_definition(&mut self) -> PResult<()> {
        let context = "define clause";
        let t = self.next_non_space();
        let name = match t.kind {
            Kind::String | Kind::RawString => self.unquote(&t)?,
            _ => return self.unexpected(&t, context),
        };
        self.expect(Kind::RightDelim, context)?;
        let saved_vars = std::mem::replace(&mut self.vars, vec!["$".to_string()]);
        let (list, end) = self.item_list()?;
        self.vars = saved_vars;
        if let ListEnd::Else { pos } = end {
            return self.err_at(pos, format!("unexpected {{{{else}}}} in {context}"));
        }
        self.add_tree(name, list)
    }

    fn item_list(&mut self) -> PResult<(Vec<Node>, ListEnd)> {
        let mut list = Vec::new();
        while self.peek_non_space().kind != Kind::Eof {
            match self.text_or_action()? {
                Item::Node(n) => list.push(n),
                Item::End(_) => return Ok((list, ListEnd::End)),
                Item::Else(pos) => return Ok((list, ListEnd::Else { pos })),
            }
        }
        self.next();
        self.err("unexpected EOF")
    }

    fn text_or_action(&mut self) -> PResult<Item> {
        let t = self.next_non_space();
        match t.kind {
            Kind::Text => Ok(Item::Node(Node::Text(t.val))),
            Kind::LeftDelim => {
                self.action_line = t.line;
                let r = self.action();
                self.action_line = 0;
                r
            }
            _ => self.unexpected(&t, "input"),
        }
    }

    fn action(&mut self) -> PResult<Item> {
        let t = self.next_non_space();
        match t.kind {
            Kind::Block => return self.block_control().map(Item::Node),
            Kind::Break => return self.break_control(t.pos, "break").map(Item::Node),
            Kind::Continue => return self.break_control(t.pos, "continue").map(Item::Node),
            Kind::Else => return self.else_control(),
            Kind::End => {
                self.expect(Kind::RightDelim, "end")?;
                return Ok(Item::End(t.pos));
            }
            Kind::If => return self.control("if").map(Item::Node),
            Kind::Range => return self.control("range").map(Item::Node),
            Kind::Template => return self.template_control().map(Item::Node),
            Kind::With => return self.control("with").map(Item::Node),
            _ => {}
        }
        self.backup();
        let pos = self.peek().pos;
        let pipe = self.pipeline("command", Kind::RightDelim)?;
        Ok(Item::Node(Node::Action { pos, pipe }))
    }

    fn break_control(&mut self, pos: usize, what: &str) -> PResult<Node> {
        let t = self.next_non_space();
        if t.kind != Kind::RightDelim {
            return self.unexpected(&t, &format!("{{{{{what}}}}}"));
        }
        if self.range_depth == 0 {
            return self.err_at(pos, format!("{{{{{what}}}}} outside {{{{range}}}}"));
        }
        Ok(if what == "break" {
            Node::Break { pos }
        } else {
            Node::Continue { pos }
        })
    }

    fn else_control(&mut self) -> PResult<Item> {
        let p = self.peek_non_space();
        // "else if" / "else with": leave the keyword pending for the enclosing control.
        if p.kind == Kind::If || p.kind == Kind::With {
            return Ok(Item::Else(p.pos));
        }
        let t = self.expect(Kind::RightDelim, "else")?;
        Ok(Item::Else(t.pos))
    }

    fn control(&mut self, context: &str) -> PResult<Node> {
        self.enter()?;
        let nvars = self.vars.len();
        let pipe = self.pipeline(context, Kind::RightDelim)?;
        let pos = pipe.pos;
        if context == "range" {
            self.range_depth += 1;
        }
        let (list, end) = self.item_list()?;
        if context == "range" {
            self.range_depth -= 1;
        }
        let mut else_list = None;
        if let ListEnd::Else { .. } = end {
            let p = self.peek_non_space();
            if (context == "if" && p.kind == Kind::If)
                || (context == "with" && p.kind == Kind::With)
            {
                // {{if a}}_{{else if b}}_{{end}} == {{if a}}_{{else}}{{if b}}_{{end}}{{end}}
                self.next_non_space();
                let inner = self.control(context)?;
                else_list = Some(vec![inner]);
            } else {
                let (el, end2) = self.item_list()?;
                if let ListEnd::Else { pos } = end2 {
                    return self.err_at(pos, "expected end; found {{else}}");
                }
                else_list = Some(el);
            }
        }
        self.vars.truncate(nvars);
        self.leave();
        let b = Branch {
            pos,
            pipe,
            list,
            else_list,
        };
        Ok(match context {
            "if" => Node::If(b),
            "range" => Node::Range(b),
            _ => Node::With(b),
        })
    }

    fn template_name(&mut self, context: &str) -> PResult<String> {
        let t = self.next_non_space();
        match t.kind {
            Kind::String | Kind::RawString => self.unquote(&t),
            _ => self.unexpected(&t, context),
        }
    }

    fn template_control(&mut self) -> PResult<Node> {
        let context = "template clause";
        let pos = self.peek_non_space().pos;
        let name = self.template_name(context)?;
        let pipe = if self.next_non_space().kind != Kind::RightDelim {
            self.backup();
            Some(self.pipeline(context, Kind::RightDelim)?)
        } else {
            None
        };
        Ok(Node::Template { pos, name, pipe })
    }

    fn block_control(&mut self) -> PResult<Node> {
        let context = "block clause";
        let pos = self.peek_non_space().pos;
        let name = self.template_name(context)?;
        let pipe = self.pipeline(context, Kind::RightDelim)?;
        self.enter()?;
        let saved_vars = std::mem::replace(&mut self.vars, vec!["$".to_string()]);
        let saved_range = std::mem::replace(&mut self.range_depth, 0);
        let (list, end) = self.item_list()?;
        self.vars = saved_vars;
        self.range_depth = saved_range;
        self.leave();
        if let ListEnd::Else { pos } = end {
            return self.err_at(pos, format!("unexpected {{{{else}}}} in {context}"));
        }
        self.add_tree(name.clone(), list)?;
        Ok(Node::Template {
            pos,
            name,
            pipe: Some(pipe),
        })
    }

    fn pipeline(&mut self, context: &str, end: Kind) -> PResult<Pipe> {
        let pos = self.peek_non_space().pos;
        let mut pipe = Pipe {
            pos,
            is_assign: false,
            decl: Vec::new(),
            cmds: Vec::new(),
        };
        // declarations
        'decls: loop {
            let v = self.peek_non_space();
            if v.kind != Kind::Variable {
                break;
            }
            let save = self.idx;
            self.next_non_space();
            let next = self.next_non_space();
            match next.kind {
                Kind::Assign | Kind::Declare => {
                    pipe.is_assign = next.kind == Kind::Assign;
                    if pipe.is_assign && !self.vars.contains(&v.val) {
                        return self.err_at(
                            v.pos,
                            format!("undefined variable {}", crate::gofmt::quote(&v.val)),
                        );
                    }
                    pipe.decl.push(v.val.clone());
                    if !pipe.is_assign {
                        self.vars.push(v.val.clone());
                    }
                    break 'decls;
                }
                Kind::Char if next.val == "," => {
                    pipe.decl.push(v.val.clone());
                    self.vars.push(v.val.clone());
                    if context == "range" && pipe.decl.len() < 2 {
                        let p = self.peek_non_space();
                        if p.kind == Kind::Variable {
                            continue 'decls;
                        }
                        return self.err_at(p.pos, "range can only initialize variables");
                    }
                    return self.err_at(next.pos, format!("too many declarations in {context}"));
                }
                _ => {
                    self.idx = save;
                    break;
                }
            }
        }
        loop {
            let t = self.next_non_space();
            if t.kind == end {
                if pipe.cmds.is_empty() {
                    return self.err_at(t.pos, format!("missing value for {context}"));
                }
                for (i, c) in pipe.cmds.iter().enumerate().skip(1) {
                    if let Some(
                        Arg::Bool { .. }
                        | Arg::Dot { .. }
                        | Arg::Nil { .. }
                        | Arg::Number { .. }
                        | Arg::String { .. },
                    ) = c.args.first()
                    {
                        return self.err_at(
                            c.pos,
                            format!("non executable command in pipeline stage {}", i + 1),
                        );
                    }
                }
                return Ok(pipe);
            }
            match t.kind {
                Kind::Bool
                | Kind::CharConstant
                | Kind::Dot
                | Kind::Field
                | Kind::Identifier
                | Kind::Number
                | Kind::Nil
                | Kind::RawString
                | Kind::String
                | Kind::Variable
                | Kind::LeftParen => {
                    self.backup();
                    let c = self.command()?;
                    pipe.cmds.push(c);
                }
                _ => return self.unexpected(&t, context),
            }
        }
    }

    fn command(&mut self) -> PResult<Command> {
        let pos = self.peek_non_space().pos;
        let mut cmd = Command {
            pos,
            args: Vec::new(),
        };
        loop {
            self.peek_non_space();
            if let Some(op) = self.operand()? {
                cmd.args.push(op);
            }
            let t = self.next();
            match t.kind {
                Kind::Space => continue,
                Kind::RightDelim | Kind::RightParen => self.backup(),
                Kind::Pipe => {}
                _ => return self.unexpected(&t, "operand"),
            }
            break;
        }
        if cmd.args.is_empty() {
            return self.err("empty command");
        }
        Ok(cmd)
    }

    fn operand(&mut self) -> PResult<Option<Arg>> {
        let Some(node) = self.term()? else {
            return Ok(None);
        };
        if self.peek().kind == Kind::Field {
            let pos = node.pos();
            let mut fields = Vec::new();
            while self.peek().kind == Kind::Field {
                let t = self.next();
                fields.push(t.val[1..].to_string());
            }
            return Ok(Some(match node {
                Arg::Field { pos, mut idents } => {
                    idents.extend(fields);
                    Arg::Field { pos, idents }
                }
                Arg::Variable { pos, mut idents } => {
                    idents.extend(fields);
                    Arg::Variable { pos, idents }
                }
                Arg::Bool { .. }
                | Arg::String { .. }
                | Arg::Number { .. }
                | Arg::Nil { .. }
                | Arg::Dot { .. } => {
                    return self.err_at(
                        pos,
                        format!(
                            "unexpected . after term {}",
                            crate::gofmt::quote(&node.to_string())
                        ),
                    );
                }
                other => Arg::Chain {
                    pos,
                    node: Box::new(other),
                    fields,
                },
            }));
        }
        Ok(Some(node))
    }

    fn term(&mut self) -> PResult<Option<Arg>> {
        let t = self.next_non_space();
        let pos = t.pos;
        Ok(Some(match t.kind {
            Kind::Identifier => {
                if !(self.has_func)(&t.val) {
                    return self.err_at(
                        pos,
                        format!("function {} not defined", crate::gofmt::quote(&t.val)),
                    );
                }
                Arg::Identifier { pos, name: t.val }
            }
            Kind::Dot => Arg::Dot { pos },
            Kind::Nil => Arg::Nil { pos },
            Kind::Variable => {
                // "$x.a" arrives as one Variable token "$x" followed by Field tokens.
                if !self.vars.contains(&t.val) {
                    return self.err_at(
                        pos,
                        format!("undefined variable {}", crate::gofmt::quote(&t.val)),
                    );
                }
                Arg::Variable {
                    pos,
                    idents: vec![t.val],
                }
            }
            Kind::Field => Arg::Field {
                pos,
                idents: vec![t.val[1..].to_string()],
            },
            Kind::Bool => Arg::Bool {
                pos,
                val: t.val == "true",
            },
            Kind::CharConstant | Kind::Number => Arg::Number {
                pos,
                num: self.number(&t)?,
            },
            Kind::LeftParen => {
                self.enter()?;
                let pipe = self.pipeline("parenthesized pipeline", Kind::RightParen)?;
                self.leave();
                Arg::Pipe {
                    pos,
                    pipe: Box::new(pipe),
                }
            }
            Kind::String | Kind::RawString => {
                let text = self.unquote(&t)?;
                Arg::String {
                    pos,
                    quoted: t.val,
                    text,
                }
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        }))
    }

    fn unquote(&self, t: &Token) -> PResult<String> {
        match unquote(&t.val) {
            Some(s) => Ok(s),
            None => self.err_at(t.pos, format!("invalid syntax: {}", t.val)),
        }
    }

    fn number(&self, t: &Token) -> PResult<Number> {
        if t.kind == Kind::CharConstant {
            let inner = unquote_char_constant(&t.val);
            return match inner {
                Some(c) => Ok(Number {
                    text: t.val.clone(),
                    int: Some(c as i64),
                    float: Some(c as u32 as f64),
                    is_char: true,
                }),
                None => self.err_at(t.pos, format!("malformed character constant: {}", t.val)),
            };
        }
        match parse_number(&t.val) {
            Ok(n) => Ok(n),
            Err(msg) => self.err_at(t.pos, msg),
        }
    }
}

enum Item {
    Node(Node),
    End(usize),
    Else(usize),
}

fn parse_number(text: &str) -> Result<Number, String> {
    if text.ends_with('i') {
        return Err(format!(
            "complex numbers are not supported: {}",
            crate::gofmt::quote(text)
        ));
    }
    let illegal = || format!("illegal number syntax: {}", crate::gofmt::quote(text));
    let (neg, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    // Go's strconv rule (base 0): an underscore must sit between digits, a base prefix
    // counting as a digit (`0b_1_0_1`, `0x_1.e_0p+0_2`).
    if body.contains('_') && !underscores_ok(body) {
        return Err(illegal());
    }
    let clean: String = body.chars().filter(|c| *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') && lower.bytes().all(|b| b.is_ascii_digit())
    {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix)) {
        return match u64::from_str_radix(digits, radix) {
            Ok(u) => {
                let i = if neg {
                    (u <= i64::MAX as u64 + 1).then(|| (u as i128).wrapping_neg() as i64)
                } else {
                    i64::try_from(u).ok()
                };
                let f = if neg { -(u as f64) } else { u as f64 };
                match i {
                    Some(i) => Ok(Number {
                        text: text.to_string(),
                        int: Some(i),
                        float: Some(f),
                        is_char: false,
                    }),
                    None => Err(format!("{text} overflows int")),
                }
            }
            Err(_) => Err(format!("integer overflow: {}", crate::gofmt::quote(text))),
        };
    }
    let parsed = match radix {
        16 => parse_hex_float(digits),
        10 if !lower.contains("inf") && !lower.contains("nan") => digits.parse::<f64>().ok(),
        _ => None,
    };
    match parsed {
        Some(f) if f.is_finite() => {
            let f = if neg { -f } else { f };
            let int = if f.fract() == 0.0 && f.abs() < 9.2e18 {
                Some(f as i64)
            } else {
                None
            };
            Ok(Number {
                text: text.to_string(),
                int,
                float: Some(f),
                is_char: false,
            })
        }
        _ => Err(illegal()),
    }
}

/// Go's `underscoreOK` (strconv): underscores only between digits, where a base prefix counts
/// as a digit.
fn underscores_ok(s: &str) -> bool {
    let b = s.as_bytes();
    // '^' start, '0' digit or prefix, '_' underscore, '!' anything else
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &b[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else if saw == b'_' {
            return false;
        } else {
            saw = b'!';
        }
    }
    saw != b'_'
}

/// A hexadecimal floating-point literal after its `0x` prefix (lower case, no underscores):
/// `1.ep+2` = 7.5. The `p` exponent is required, as in Go.
fn parse_hex_float(s: &str) -> Option<f64> {
    let (mantissa, exp) = s.split_once('p')?;
    let exp: i32 = match exp.strip_prefix('+') {
        Some(e) => e.parse().ok()?,
        None => exp.parse().ok()?,
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let mut value = 0f64;
    for c in int_part.chars() {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac_part.chars() {
        value += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(value * 2f64.powi(exp))
}

fn unquote_char_constant(s: &str) -> Option<char> {
    let inner = s.strip_prefix('\'')?.strip_suffix('\'')?;
    let mut chars = inner.chars().peekable();
    let (c, rest) = unescape_one(&mut chars, '\'')?;
    if rest || chars.next().is_some() {
        return None;
    }
    Some(c)
}

/// Reads one (possibly escaped) character. The bool is unused padding for symmetry.
fn unescape_one(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    quote: char,
) -> Option<(char, bool)> {
    let c = chars.next()?;
    if c != '\\' {
        if c == quote && quote == '\'' {
            return None;
        }
        return Some((c, false));
    }
    let e = chars.next()?;
    let hex = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>, n: usize| -> Option<u32> {
        let mut v = 0u32;
        for _ in 0..n {
            v = v * 16 + chars.next()?.to_digit(16)?;
        }
        Some(v)
    };
    let c = match e {
        'a' => '\u{7}',
        'b' => '\u{8}',
        'f' => '\u{c}',
        'n' => '\n',
        'r' => '\r',
        't' => '\t',
        'v' => '\u{b}',
        '\\' => '\\',
        '\'' if quote == '\'' => '\'',
        '"' if quote == '"' => '"',
        'x' => char::from_u32(hex(chars, 2)?)?,
        'u' => char::from_u32(hex(chars, 4)?)?,
        'U' => char::from_u32(hex(chars, 8)?)?,
        '0'..='7' => {
            let mut v = e.to_digit(8)?;
            for _ in 0..2 {
                v = v * 8 + chars.next()?.to_digit(8)?;
            }
            if v > 255 {
                return None;
            }
            char::from_u32(v)?
        }
        _ => return None,
    };
    Some((c, false))
}

/// Go's `strconv.Unquote` for double-quoted and raw (backquoted) strings.
pub fn unquote(s: &str) -> Option<String> {
    if let Some(inner) = s.strip_prefix('`') {
        let inner = inner.strip_suffix('`')?;
        if inner.contains('`') {
            return None;
        }
        return Some(inner.replace('\r', ""));
    }
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while chars.peek().is_some() {
        if chars.peek() == Some(&'"') || chars.peek() == Some(&'\n') {
            return None;
        }
        let (c, _) = unescape_one(&mut chars, '"')?;
        out.push(c);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn numbers() {
        let n = parse_number("0x1F").unwrap();
        assert_eq!(n.int, Some(31));
        let n = parse_number("017").unwrap();
        assert_eq!(n.int, Some(15));
        let n = parse_number("1_000").unwrap();
        assert_eq!(n.int, Some(1000));
        let n = parse_number("-2.5").unwrap();
        assert_eq!(n.float, Some(-2.5));
        assert_eq!(n.int, None);
        let n = parse_number("3.0").unwrap();
        assert_eq!(n.int, Some(3));
        assert!(parse_number("99999999999999999999").is_err());
        assert!(parse_number("0x").is_err());
    }

    #[test]
    fn unquoting() {
        assert_eq!(unquote(r#""a\tb\u00e9\x41""#).as_deref(), Some("a\tbéA"));
        assert_eq!(unquote("`a\\n`").as_deref(), Some("a\\n"));
        assert_eq!(unquote(r#""\q""#), None);
        assert_eq!(unquote_char_constant("'\\n'"), Some('\n'));
    }

    #[test]
    fn node_strings() {
        let p = parse("t", "{{$x := index .a 1 | printf \"%d\" (len .b)}}", &all).unwrap();
        let root = &p.trees["t"];
        assert_eq!(
            root[0].to_string(),
            "{{$x := index .a 1 | printf \"%d\" (len .b)}}"
        );
    }

    #[test]
    fn line_col_counts_bytes() {
        assert_eq!(line_col("ab\ncd", 4), (2, 1));
        assert_eq!(line_col("abc", 2), (1, 2));
    }
}
