//! The lexer: Go `text/template/parse/lex.go` semantics (delimiters `{{` `}}`, trim markers
//! `{{- ` and ` -}}`, comments `{{/* */}}`), producing a token list with byte positions.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Error,
    Bool,
    Char,
    CharConstant,
    Assign,
    Declare,
    Eof,
    Field,
    Identifier,
    LeftDelim,
    LeftParen,
    Number,
    Pipe,
    RawString,
    RightDelim,
    RightParen,
    Space,
    String,
    Text,
    Variable,
    // keywords
    Block,
    Break,
    Continue,
    Dot,
    Define,
    Else,
    End,
    If,
    Nil,
    Range,
    Template,
    With,
}

impl Kind {
    fn is_keyword(self) -> bool {
        matches!(
            self,
            Kind::Block
                | Kind::Break
                | Kind::Continue
                | Kind::Dot
                | Kind::Define
                | Kind::Else
                | Kind::End
                | Kind::If
                | Kind::Nil
                | Kind::Range
                | Kind::Template
                | Kind::With
        )
    }
}

#[derive(Clone, Debug)]
pub struct Token {
    pub kind: Kind,
    pub val: String,
    pub pos: usize,
    pub line: usize,
}

impl std::fmt::Display for Token {
    /// As Go's `item.String()`, used in "unexpected X in Y" messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            Kind::Eof => write!(f, "EOF"),
            Kind::Error => write!(f, "{}", self.val),
            k if k.is_keyword() => write!(f, "<{}>", self.val),
            _ => {
                if self.val.chars().count() > 10 {
                    let head: String = self.val.chars().take(10).collect();
                    // Go: %.10q quotes the first ten characters.
                    write!(f, "{}...", crate::gofmt::quote(&head))
                } else {
                    write!(f, "{}", crate::gofmt::quote(&self.val))
                }
            }
        }
    }
}

const LEFT: &str = "{{";
const RIGHT: &str = "}}";

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_alnum(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

fn has_left_trim(s: &[u8]) -> bool {
    s.len() >= 2 && s[0] == b'-' && is_space(s[1])
}

fn has_right_trim(s: &[u8]) -> bool {
    s.len() >= 2 && is_space(s[0]) && s[1] == b'-'
}

struct Lexer<'a> {
    input: &'a str,
    bytes: &'a [u8],
    pos: usize,
    start: usize,
    line: usize,
    start_line: usize,
    paren_depth: usize,
    tokens: Vec<Token>,
}

/// Lexes a template source. The token list always ends with an `Eof` or an `Error` token.
pub fn lex(input: &str) -> Vec<Token> {
    let mut l = Lexer {
        input,
        bytes: input.as_bytes(),
        pos: 0,
        start: 0,
        line: 1,
        start_line: 1,
        paren_depth: 0,
        tokens: Vec::new(),
    };
    l.run();
    l.tokens
}

impl<'a> Lexer<'a> {
    fn emit(&mut self, kind: Kind) {
        let val = self.input[self.start..self.pos].to_string();
        self.tokens.push(Token {
            kind,
            val,
            pos: self.start,
            line: self.start_line,
        });
        self.ignore();
    }

    /// Moves `start` to `pos`, counting the newlines passed over.
    fn ignore(&mut self) {
        self.line += self.input[self.start..self.pos].matches('\n').count();
        self.start = self.pos;
        self.start_line = self.line;
    }

    fn error(&mut self, msg: String) {
        self.tokens.push(Token {
            kind: Kind::Error,
            val: msg,
            pos: self.start,
            line: self.start_line,
        });
    }

    fn peek_char(&self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    fn next_char(&mut self) -> Option<char> {
        let c = self.peek_char()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn accept(&mut self, valid: &str) -> bool {
        if let Some(c) = self.peek_char()
            && valid.contains(c)
        {
            self.pos += c.len_utf8();
            return true;
        }
        false
    }

    fn accept_run(&mut self, valid: &str) {
        while self.accept(valid) {}
    }

    fn at_right_delim(&self) -> (bool, bool) {
        let rest = &self.bytes[self.pos..];
        if has_right_trim(rest) && self.input[self.pos + 2..].starts_with(RIGHT) {
            return (true, true);
        }
        if self.input[self.pos..].starts_with(RIGHT) {
            return (true, false);
        }
        (false, false)
    }

    fn run(&mut self) {
        loop {
            // lexText
            match self.input[self.pos..].find(LEFT) {
                Some(x) => {
                    self.pos += x;
                    let delim_end = self.pos + LEFT.len();
                    let mut trim = 0;
                    if has_left_trim(&self.bytes[delim_end..]) {
                        let text = &self.input[self.start..self.pos];
                        trim = text.len() - text.trim_end_matches([' ', '\t', '\r', '\n']).len();
                    }
                    self.pos -= trim;
                    if self.pos > self.start {
                        self.emit(Kind::Text);
                    }
                    self.pos += trim;
                    self.ignore();
                    if !self.lex_left_delim() {
                        return;
                    }
                }
                None => {
                    self.pos = self.input.len();
                    if self.pos > self.start {
                        self.emit(Kind::Text);
                    }
                    self.tokens.push(Token {
                        kind: Kind::Eof,
                        val: String::new(),
                        pos: self.pos,
                        line: self.line,
                    });
                    return;
                }
            }
        }
    }

    /// Lexes from a left delimiter to the end of the action or comment. Returns false on error.
    fn lex_left_delim(&mut self) -> bool {
        self.pos += LEFT.len();
        let trim = has_left_trim(&self.bytes[self.pos..]);
        let after = if trim { 2 } else { 0 };
        if self.input[self.pos + after..].starts_with("/*") {
            self.pos += after;
            self.ignore();
            return self.lex_comment();
        }
        self.emit(Kind::LeftDelim);
        self.pos += after;
        self.ignore();
        self.paren_depth = 0;
        self.lex_inside_action()
    }

    fn lex_comment(&mut self) -> bool {
        self.pos += 2;
        let Some(x) = self.input[self.pos..].find("*/") else {
            self.error("unclosed comment".to_string());
            return false;
        };
        self.pos += x + 2;
        let (delim, trim) = self.at_right_delim();
        if !delim {
            self.error("comment ends before closing delimiter".to_string());
            return false;
        }
        if trim {
            self.pos += 2;
        }
        self.pos += RIGHT.len();
        if trim {
            self.skip_leading_space();
        }
        self.ignore();
        true
    }

    fn skip_leading_space(&mut self) {
        while self.pos < self.bytes.len() && is_space(self.bytes[self.pos]) {
            self.pos += 1;
        }
    }

    fn lex_right_delim(&mut self, trim: bool) {
        if trim {
            self.pos += 2;
            self.ignore();
        }
        self.pos += RIGHT.len();
        self.emit(Kind::RightDelim);
        if trim {
            self.skip_leading_space();
            self.ignore();
        }
    }

    fn lex_inside_action(&mut self) -> bool {
        loop {
            let (delim, trim) = self.at_right_delim();
            if delim {
                if self.paren_depth == 0 {
                    self.lex_right_delim(trim);
                    return true;
                }
                self.error("unclosed left paren".to_string());
                return false;
            }
            let Some(c) = self.next_char() else {
                self.error("unclosed action".to_string());
                return false;
            };
            match c {
                ' ' | '\t' | '\r' | '\n' => {
                    self.pos -= 1;
                    self.lex_space();
                }
                '=' => self.emit(Kind::Assign),
                ':' => {
                    if self.next_char() != Some('=') {
                        self.error("expected :=".to_string());
                        return false;
                    }
                    self.emit(Kind::Declare);
                }
                '|' => self.emit(Kind::Pipe),
                '"' => {
                    if !self.lex_quote() {
                        return false;
                    }
                }
                '`' => {
                    if !self.lex_raw_quote() {
                        return false;
                    }
                }
                '$' => {
                    if !self.lex_field_or_variable(Kind::Variable) {
                        return false;
                    }
                }
                '\'' => {
                    if !self.lex_char() {
                        return false;
                    }
                }
                '.' => {
                    let next_is_digit =
                        self.bytes.get(self.pos).is_some_and(|b| b.is_ascii_digit());
                    if next_is_digit {
                        self.pos -= 1;
                        if !self.lex_number() {
                            return false;
                        }
                    } else if !self.lex_field_or_variable(Kind::Field) {
                        return false;
                    }
                }
                '+' | '-' | '0'..='9' => {
                    self.pos -= 1;
                    if !self.lex_number() {
                        return false;
                    }
                }
                c if is_alnum(c) => {
                    self.pos -= c.len_utf8();
                    if !self.lex_identifier() {
                        return false;
                    }
                }
                '(' => {
                    self.emit(Kind::LeftParen);
                    self.paren_depth += 1;
                }
                ')' => {
                    self.emit(Kind::RightParen);
                    if self.paren_depth == 0 {
                        self.error("unexpected right paren".to_string());
                        return false;
                    }
                    self.paren_depth -= 1;
                }
                c if c.is_ascii() && !c.is_ascii_control() => self.emit(Kind::Char),
                c => {
                    self.error(format!(
                        "unrecognized character in action: {}",
                        go_unicode_repr(c)
                    ));
                    return false;
                }
            }
        }
    }

    fn lex_space(&mut self) {
        let mut n = 0;
        while self.pos < self.bytes.len() && is_space(self.bytes[self.pos]) {
            self.pos += 1;
            n += 1;
        }
        // A trim-marked right delimiter starts with a space: leave that space to it.
        if has_right_trim(&self.bytes[self.pos - 1..])
            && self.input[self.pos - 1 + 2..].starts_with(RIGHT)
        {
            self.pos -= 1;
            if n == 1 {
                return;
            }
        }
        self.emit(Kind::Space);
    }

    fn lex_quote(&mut self) -> bool {
        loop {
            match self.next_char() {
                Some('\\') => {
                    if let Some(c) = self.next_char()
                        && c != '\n'
                    {
                        continue;
                    }
                    self.error("unterminated quoted string".to_string());
                    return false;
                }
                Some('\n') | None => {
                    self.error("unterminated quoted string".to_string());
                    return false;
                }
                Some('"') => break,
                Some(_) => {}
            }
        }
        self.emit(Kind::String);
        true
    }

    fn lex_raw_quote(&mut self) -> bool {
        match self.input[self.pos..].find('`') {
            Some(x) => {
                self.pos += x + 1;
                self.emit(Kind::RawString);
                true
            }
            None => {
                self.error("unterminated raw quoted string".to_string());
                false
            }
        }
    }

    fn lex_char(&mut self) -> bool {
        loop {
            match self.next_char() {
                Some('\\') => {
                    if let Some(c) = self.next_char()
                        && c != '\n'
                    {
                        continue;
                    }
                    self.error("unterminated character constant".to_string());
                    return false;
                }
                Some('\n') | None => {
                    self.error("unterminated character constant".to_string());
                    return false;
                }
                Some('\'') => break,
                Some(_) => {}
            }
        }
        self.emit(Kind::CharConstant);
        true
    }

    fn at_terminator(&self) -> bool {
        match self.peek_char() {
            None => true,
            Some(c) if c.is_ascii() && is_space(c as u8) => true,
            Some('.' | ',' | '|' | ':' | ')' | '(') => true,
            _ => self.input[self.pos..].starts_with(RIGHT),
        }
    }

    fn lex_field_or_variable(&mut self, kind: Kind) -> bool {
        if self.at_terminator() {
            if kind == Kind::Variable {
                self.emit(Kind::Variable);
            } else {
                self.emit(Kind::Dot);
            }
            return true;
        }
        while let Some(c) = self.peek_char() {
            if !is_alnum(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        if !self.at_terminator() {
            let c = self.peek_char().unwrap_or(' ');
            self.error(format!("bad character {}", go_unicode_repr(c)));
            return false;
        }
        self.emit(kind);
        true
    }

    fn lex_identifier(&mut self) -> bool {
        while let Some(c) = self.peek_char() {
            if !is_alnum(c) {
                break;
            }
            self.pos += c.len_utf8();
        }
        if !self.at_terminator() {
            let c = self.peek_char().unwrap_or(' ');
            self.error(format!("bad character {}", go_unicode_repr(c)));
            return false;
        }
        let word = &self.input[self.start..self.pos];
        let kind = match word {
            "block" => Kind::Block,
            "break" => Kind::Break,
            "continue" => Kind::Continue,
            "define" => Kind::Define,
            "else" => Kind::Else,
            "end" => Kind::End,
            "if" => Kind::If,
            "range" => Kind::Range,
            "nil" => Kind::Nil,
            "template" => Kind::Template,
            "with" => Kind::With,
            "true" | "false" => Kind::Bool,
            _ => Kind::Identifier,
        };
        self.emit(kind);
        true
    }

    fn lex_number(&mut self) -> bool {
        if !self.scan_number() {
            let text = self.input[self.start..self.pos].to_string();
            self.error(format!("bad number syntax: {}", crate::gofmt::quote(&text)));
            return false;
        }
        self.emit(Kind::Number);
        true
    }

    fn scan_number(&mut self) -> bool {
        self.accept("+-");
        let mut digits = "0123456789_";
        if self.accept("0") {
            if self.accept("xX") {
                digits = "0123456789abcdefABCDEF_";
            } else if self.accept("oO") {
                digits = "01234567_";
            } else if self.accept("bB") {
                digits = "01_";
            }
        }
        self.accept_run(digits);
        if self.accept(".") {
            self.accept_run(digits);
        }
        if digits.len() == 11 && self.accept("eE") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        if digits.len() == 23 && self.accept("pP") {
            self.accept("+-");
            self.accept_run("0123456789_");
        }
        self.accept("i");
        if let Some(c) = self.peek_char()
            && is_alnum(c)
        {
            self.pos += c.len_utf8();
            return false;
        }
        true
    }
}

/// Go's `%#U` for a rune: `U+0041 'A'`.
pub fn go_unicode_repr(c: char) -> String {
    if crate::gofmt::is_print(c) {
        format!("U+{:04X} '{}'", c as u32, c)
    } else {
        format!("U+{:04X}", c as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(Kind, String)> {
        lex(src).into_iter().map(|t| (t.kind, t.val)).collect()
    }

    #[test]
    fn trims_and_comments() {
        let toks = kinds("a  {{- .x -}}  b{{/* c */}}d{{- /* e */ -}} f");
        let want = vec![
            (Kind::Text, "a".to_string()),
            (Kind::LeftDelim, "{{".to_string()),
            (Kind::Field, ".x".to_string()),
            (Kind::RightDelim, "}}".to_string()),
            (Kind::Text, "b".to_string()),
            (Kind::Text, "d".to_string()),
            (Kind::Text, "f".to_string()),
            (Kind::Eof, String::new()),
        ];
        assert_eq!(toks, want);
    }

    #[test]
    fn numbers_and_errors() {
        let toks = kinds("{{-3}}");
        assert_eq!(toks[1], (Kind::Number, "-3".to_string()));
        let toks = kinds("{{ 3x }}");
        assert_eq!(
            toks.last().map(|t| t.1.clone()),
            Some("bad number syntax: \"3x\"".to_string())
        );
        let toks = kinds("{{ .x ");
        assert_eq!(toks.last().map(|t| t.0), Some(Kind::Error));
    }

    #[test]
    fn lines_are_counted() {
        let toks = lex("a\nb\n{{ .x\n }}\n{{.y}}");
        let y = toks.iter().find(|t| t.val == ".y").map(|t| t.line);
        assert_eq!(y, Some(5));
    }
}
