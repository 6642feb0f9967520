//! The templates of `line_format` and `label_format`: the part of Go's `text/template` that
//! Loki's templates use (`{{ .label }}`, pipes, `if`/`else if`/`else`/`end`, trim markers and
//! comments) with Loki's functions for text and numbers. A function loghaul does not have is
//! refused when the query is compiled, by name.

use std::fmt::Write as _;

use base64::Engine as _;

use super::go_time;
use super::labels::Labels;

/// Why a template cannot be used: it does not parse, or names what is not supported.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TemplateError(String);

/// A compiled template.
#[derive(Clone, Debug)]
pub(crate) struct Template {
    name: &'static str,
    source: String,
    nodes: Vec<Node>,
}

/// What a template sees of the line it runs on.
pub(crate) struct Context<'a> {
    /// The labels, as `.name`.
    pub labels: &'a Labels,
    /// `__line__`.
    pub line: &'a str,
    /// `__timestamp__`, in nanoseconds since the epoch.
    pub timestamp: i64,
}

#[derive(Clone, Debug)]
enum Node {
    Text(String),
    Action(Pipe),
    If {
        branches: Vec<(Pipe, Vec<Node>)>,
        otherwise: Vec<Node>,
    },
}

#[derive(Clone, Debug)]
struct Pipe {
    commands: Vec<Command>,
}

#[derive(Clone, Debug)]
struct Command {
    /// Where the command starts in the template, for error messages.
    at: usize,
    /// The command as written, for error messages.
    text: String,
    args: Vec<Arg>,
}

#[derive(Clone, Debug)]
enum Arg {
    Field(String),
    Dot,
    Func(&'static str),
    Value(Value),
    Sub(Pipe),
}

/// A value while a template runs.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// A time, in nanoseconds since the epoch.
    Time(i64),
    /// A missing label's value (`missingkey=zero`): the empty string.
    Missing,
}

impl Value {
    fn truthy(&self) -> bool {
        match self {
            Value::Str(text) => !text.is_empty(),
            Value::Int(n) => *n != 0,
            Value::Float(n) => *n != 0.0,
            Value::Bool(b) => *b,
            Value::Time(_) => true,
            Value::Missing => false,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Value::Str(_) | Value::Missing => "string",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Bool(_) => "bool",
            Value::Time(_) => "time.Time",
        }
    }

    /// The value as Go's `fmt` prints it with `%v`.
    fn print(&self, out: &mut String) {
        match self {
            Value::Str(text) => out.push_str(text),
            Value::Missing => {}
            Value::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Float(n) => out.push_str(&go_float(*n)),
            Value::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            Value::Time(ns) => out.push_str(&go_time::format(*ns, go_time::PRINTED)),
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        self.print(&mut out);
        out
    }
}

/// A float as Go's `%v` and `%g` print it: the shortest digits, in exponent form when the
/// exponent is below -4 or at least 6 (`1.5e+06`, `999999`).
fn go_float(n: f64) -> String {
    if n.is_nan() {
        return "NaN".into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let scientific = format!("{n:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if n != 0.0 && !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exponent.abs());
    }
    format!("{n}")
}

/// Every function a template may call, with how many arguments it takes (`None`: any number
/// from the second field).
const FUNCTIONS: &[(&str, usize, Option<usize>)] = &[
    ("ToLower", 1, Some(1)),
    ("ToUpper", 1, Some(1)),
    ("Replace", 4, Some(4)),
    ("Trim", 2, Some(2)),
    ("TrimLeft", 2, Some(2)),
    ("TrimRight", 2, Some(2)),
    ("TrimPrefix", 2, Some(2)),
    ("TrimSuffix", 2, Some(2)),
    ("TrimSpace", 1, Some(1)),
    ("regexReplaceAll", 3, Some(3)),
    ("regexReplaceAllLiteral", 3, Some(3)),
    ("count", 2, Some(2)),
    ("urldecode", 1, Some(1)),
    ("urlencode", 1, Some(1)),
    ("bytes", 1, Some(1)),
    ("duration", 1, Some(1)),
    ("duration_seconds", 1, Some(1)),
    ("unixEpochMillis", 1, Some(1)),
    ("unixEpochNanos", 1, Some(1)),
    ("unixEpoch", 1, Some(1)),
    ("unixToTime", 1, Some(1)),
    ("date", 2, Some(2)),
    ("now", 0, Some(0)),
    ("alignLeft", 2, Some(2)),
    ("alignRight", 2, Some(2)),
    ("__line__", 0, Some(0)),
    ("__timestamp__", 0, Some(0)),
    ("b64enc", 1, Some(1)),
    ("b64dec", 1, Some(1)),
    ("lower", 1, Some(1)),
    ("upper", 1, Some(1)),
    ("title", 1, Some(1)),
    ("trunc", 2, Some(2)),
    ("substr", 3, Some(3)),
    ("contains", 2, Some(2)),
    ("hasPrefix", 2, Some(2)),
    ("hasSuffix", 2, Some(2)),
    ("indent", 2, Some(2)),
    ("nindent", 2, Some(2)),
    ("replace", 3, Some(3)),
    ("repeat", 2, Some(2)),
    ("trim", 1, Some(1)),
    ("trimAll", 2, Some(2)),
    ("trimSuffix", 2, Some(2)),
    ("trimPrefix", 2, Some(2)),
    ("int", 1, Some(1)),
    ("float64", 1, Some(1)),
    ("add", 0, None),
    ("sub", 2, Some(2)),
    ("mul", 1, None),
    ("div", 2, Some(2)),
    ("mod", 2, Some(2)),
    ("addf", 0, None),
    ("subf", 1, None),
    ("mulf", 1, None),
    ("divf", 1, None),
    ("max", 1, None),
    ("min", 1, None),
    ("maxf", 1, None),
    ("minf", 1, None),
    ("ceil", 1, Some(1)),
    ("floor", 1, Some(1)),
    ("round", 2, Some(3)),
    ("default", 1, None),
    ("eq", 1, None),
    ("ne", 2, Some(2)),
    ("lt", 2, Some(2)),
    ("le", 2, Some(2)),
    ("gt", 2, Some(2)),
    ("ge", 2, Some(2)),
    ("and", 1, None),
    ("or", 1, None),
    ("not", 1, Some(1)),
    ("len", 1, Some(1)),
    ("print", 0, None),
    ("println", 0, None),
    ("printf", 1, None),
];

impl Template {
    /// Compiles `text`, a template of `line_format` (`name` "line") or of `label_format`
    /// ("label").
    pub(crate) fn parse(name: &'static str, text: &str) -> Result<Self, TemplateError> {
        let mut parser = TemplateParser {
            text,
            at: 0,
            trim_next: false,
        };
        let (nodes, end) = parser.list()?;
        if let Some(keyword) = end {
            return Err(TemplateError(format!(
                "template: {name}: unexpected {{{{{keyword}}}}}"
            )));
        }
        Ok(Template {
            name,
            source: text.to_owned(),
            nodes,
        })
    }

    /// The template's text for `context`, or Go's error for the first call that failed (Loki's
    /// `__error_details__`).
    pub(crate) fn render(&self, context: &Context<'_>) -> Result<String, String> {
        let mut out = String::new();
        let run = Run {
            name: self.name,
            source: &self.source,
            context,
        };
        run.nodes(&self.nodes, &mut out)?;
        Ok(out)
    }

    /// `{{.name}}` alone: Loki copies that label's value without running the template.
    pub(crate) fn single_label(&self) -> Option<&str> {
        match self.nodes.as_slice() {
            [Node::Action(Pipe { commands })] => match commands.as_slice() {
                [Command { args, .. }] => match args.as_slice() {
                    [Arg::Field(name)] => Some(name),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        }
    }
}

struct TemplateParser<'a> {
    text: &'a str,
    at: usize,
    /// The previous action ended with `-}}`: the text after it starts without its spaces.
    trim_next: bool,
}

/// The keyword that ended a list: `else`, `else if …` or `end`.
enum ListEnd {
    Else,
    ElseIf(Pipe),
    End,
}

impl std::fmt::Display for ListEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ListEnd::Else | ListEnd::ElseIf(_) => "else",
            ListEnd::End => "end",
        })
    }
}

impl TemplateParser<'_> {
    fn error(&self, message: impl std::fmt::Display) -> TemplateError {
        TemplateError(format!("template: {message}"))
    }

    /// Nodes up to the end of the text or to an `else`/`end`, which it returns.
    fn list(&mut self) -> Result<(Vec<Node>, Option<ListEnd>), TemplateError> {
        let mut nodes = Vec::new();
        loop {
            let rest = &self.text[self.at..];
            let open = rest.find("{{");
            let mut text = &rest[..open.unwrap_or(rest.len())];
            if std::mem::take(&mut self.trim_next) {
                text = text.trim_start_matches(is_go_space);
            }
            let Some(open) = open else {
                if !text.is_empty() {
                    nodes.push(Node::Text(text.to_owned()));
                }
                return Ok((nodes, None));
            };
            let trim_before = rest[open + 2..].starts_with("- ")
                || rest[open + 2..].starts_with("-\t")
                || rest[open + 2..].starts_with("-\n");
            if trim_before {
                text = text.trim_end_matches(is_go_space);
            }
            if !text.is_empty() {
                nodes.push(Node::Text(text.to_owned()));
            }
            let inner_start = self.at + open + 2 + usize::from(trim_before);
            let close = self.text[inner_start..]
                .find("}}")
                .ok_or_else(|| self.error("unclosed action"))?;
            let mut inner_end = inner_start + close;
            let after = inner_end + 2;
            let inner_text = &self.text[inner_start..inner_end];
            // Go's right trim marker is a space, then `-`, right before `}}`.
            if let Some(before) = inner_text.strip_suffix('-') {
                if before.ends_with(is_go_space) {
                    self.trim_next = true;
                    inner_end -= 1;
                }
            }
            self.at = after;
            let inner = self.text[inner_start..inner_end].trim_matches(is_go_space);
            if inner.starts_with("/*") {
                if !inner.ends_with("*/") {
                    return Err(self.error("unclosed comment"));
                }
                continue;
            }
            let offset = inner_start
                + (self.text[inner_start..inner_end].len()
                    - self.text[inner_start..inner_end]
                        .trim_start_matches(is_go_space)
                        .len());
            let mut words = Words::new(inner, offset);
            match words.peek_word() {
                Some("if") => {
                    words.next_word();
                    let pipe = words.pipe(self)?;
                    nodes.push(self.if_node(pipe)?);
                }
                Some("else") => {
                    words.next_word();
                    if words.peek_word() == Some("if") {
                        words.next_word();
                        let pipe = words.pipe(self)?;
                        return Ok((nodes, Some(ListEnd::ElseIf(pipe))));
                    }
                    words.done(self)?;
                    return Ok((nodes, Some(ListEnd::Else)));
                }
                Some("end") => {
                    words.next_word();
                    words.done(self)?;
                    return Ok((nodes, Some(ListEnd::End)));
                }
                Some(
                    keyword @ ("range" | "with" | "define" | "template" | "block" | "break"
                    | "continue"),
                ) => {
                    return Err(self.error(format!(
                        "{{{{{keyword}}}}} is not supported; templates may use if, else and end"
                    )));
                }
                _ => nodes.push(Node::Action(words.pipe(self)?)),
            }
        }
    }

    fn if_node(&mut self, first: Pipe) -> Result<Node, TemplateError> {
        let mut branches = Vec::new();
        let mut condition = first;
        loop {
            let (body, end) = self.list()?;
            branches.push((condition, body));
            match end {
                Some(ListEnd::End) => {
                    return Ok(Node::If {
                        branches,
                        otherwise: Vec::new(),
                    })
                }
                Some(ListEnd::ElseIf(next)) => condition = next,
                Some(ListEnd::Else) => {
                    let (otherwise, end) = self.list()?;
                    if !matches!(end, Some(ListEnd::End)) {
                        return Err(self.error("{{else}} without {{end}}"));
                    }
                    return Ok(Node::If {
                        branches,
                        otherwise,
                    });
                }
                None => return Err(self.error("unexpected EOF: {{if}} without {{end}}")),
            }
        }
    }
}

fn is_go_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// The words of one action.
struct Words<'a> {
    text: &'a str,
    at: usize,
    /// The action's offset in the template.
    base: usize,
}

impl<'a> Words<'a> {
    fn new(text: &'a str, base: usize) -> Self {
        Words { text, at: 0, base }
    }

    fn skip_spaces(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start_matches(is_go_space).len();
    }

    fn peek_word(&mut self) -> Option<&'a str> {
        self.skip_spaces();
        let rest = &self.text[self.at..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    }

    fn next_word(&mut self) {
        if let Some(word) = self.peek_word() {
            self.at += word.len();
        }
    }

    fn done(&mut self, parser: &TemplateParser<'_>) -> Result<(), TemplateError> {
        self.skip_spaces();
        if self.at < self.text.len() {
            return Err(parser.error(format!("unexpected {:?} in action", &self.text[self.at..])));
        }
        Ok(())
    }

    /// A pipeline to the end of the action.
    fn pipe(&mut self, parser: &TemplateParser<'_>) -> Result<Pipe, TemplateError> {
        let pipe = self.pipe_until(parser, None)?;
        self.done(parser)?;
        Ok(pipe)
    }

    fn pipe_until(
        &mut self,
        parser: &TemplateParser<'_>,
        close: Option<char>,
    ) -> Result<Pipe, TemplateError> {
        let mut commands = Vec::new();
        loop {
            self.skip_spaces();
            let start = self.at;
            let mut args = Vec::new();
            loop {
                self.skip_spaces();
                let rest = &self.text[self.at..];
                if rest.is_empty()
                    || rest.starts_with('|')
                    || close.is_some_and(|c| rest.starts_with(c))
                {
                    break;
                }
                args.push(self.arg(parser)?);
            }
            if args.is_empty() {
                return Err(parser.error("missing value for command"));
            }
            commands.push(Command {
                at: self.base + start,
                text: self.text[start..self.at]
                    .trim_end_matches(is_go_space)
                    .to_owned(),
                args,
            });
            if self.text[self.at..].starts_with('|') {
                self.at += 1;
                continue;
            }
            return Ok(Pipe { commands });
        }
    }

    fn arg(&mut self, parser: &TemplateParser<'_>) -> Result<Arg, TemplateError> {
        let rest = &self.text[self.at..];
        let first = rest.chars().next().unwrap_or(' ');
        if first == '(' {
            self.at += 1;
            let inner = self.pipe_until(parser, Some(')'))?;
            if !self.text[self.at..].starts_with(')') {
                return Err(parser.error("unclosed left paren"));
            }
            self.at += 1;
            return Ok(Arg::Sub(inner));
        }
        if first == '.' {
            let name_len = rest[1..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len() - 1);
            self.at += 1 + name_len;
            if name_len == 0 {
                return Ok(Arg::Dot);
            }
            if self.text[self.at..].starts_with('.') {
                return Err(parser.error(format!(
                    "{} is not supported: labels are text, without fields",
                    &rest[..name_len + 2]
                )));
            }
            return Ok(Arg::Field(rest[1..1 + name_len].to_owned()));
        }
        if first == '"' {
            let (value, len) =
                go_string(rest).ok_or_else(|| parser.error("unterminated quoted string"))?;
            self.at += len;
            return Ok(Arg::Value(Value::Str(value)));
        }
        if first == '`' {
            let close = rest[1..]
                .find('`')
                .ok_or_else(|| parser.error("unterminated raw quoted string"))?;
            self.at += close + 2;
            return Ok(Arg::Value(Value::Str(rest[1..1 + close].to_owned())));
        }
        if first.is_ascii_digit()
            || ((first == '-' || first == '+')
                && rest[1..].starts_with(|c: char| c.is_ascii_digit()))
        {
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_')))
                .unwrap_or(rest.len());
            let number = &rest[..len];
            self.at += len;
            if let Ok(n) = number.parse::<i64>() {
                return Ok(Arg::Value(Value::Int(n)));
            }
            if let Some(hex) = number.strip_prefix("0x") {
                if let Ok(n) = i64::from_str_radix(hex, 16) {
                    return Ok(Arg::Value(Value::Int(n)));
                }
            }
            return number
                .parse::<f64>()
                .map(|n| Arg::Value(Value::Float(n)))
                .map_err(|_| parser.error(format!("bad number syntax: {number:?}")));
        }
        if first == '$' {
            return Err(parser.error("variables ($) are not supported"));
        }
        if first.is_alphabetic() || first == '_' {
            let len = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let word = &rest[..len];
            self.at += len;
            return match word {
                "true" => Ok(Arg::Value(Value::Bool(true))),
                "false" => Ok(Arg::Value(Value::Bool(false))),
                "nil" => Err(parser.error("nil is not a command")),
                _ => match FUNCTIONS.iter().find(|(name, ..)| *name == word) {
                    Some((name, ..)) => Ok(Arg::Func(name)),
                    None => Err(TemplateError(format!(
                        "function {word:?} is not supported in templates"
                    ))),
                },
            };
        }
        Err(parser.error(format!("unexpected {first:?} in command")))
    }
}

/// A Go double-quoted string at the start of `text`: its value and its length.
fn go_string(text: &str) -> Option<(String, usize)> {
    let mut value = String::new();
    let mut chars = text.char_indices().skip(1);
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((value, at + 1)),
            '\\' => {
                let (_, escaped) = chars.next()?;
                value.push(match escaped {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    'a' => '\u{7}',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'v' => '\u{b}',
                    'x' | 'u' | 'U' => {
                        let digits = match escaped {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let mut code = 0u32;
                        for _ in 0..digits {
                            code = code * 16 + chars.next()?.1.to_digit(16)?;
                        }
                        char::from_u32(code)?
                    }
                    other => other,
                });
            }
            '\n' => return None,
            c => value.push(c),
        }
    }
    None
}

struct Run<'a> {
    name: &'static str,
    source: &'a str,
    context: &'a Context<'a>,
}

impl Run<'_> {
    fn nodes(&self, nodes: &[Node], out: &mut String) -> Result<(), String> {
        for node in nodes {
            match node {
                Node::Text(text) => out.push_str(text),
                Node::Action(pipe) => self.pipe(pipe)?.print(out),
                Node::If {
                    branches,
                    otherwise,
                } => {
                    let mut taken = false;
                    for (condition, body) in branches {
                        if self.pipe(condition)?.truthy() {
                            self.nodes(body, out)?;
                            taken = true;
                            break;
                        }
                    }
                    if !taken {
                        self.nodes(otherwise, out)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn pipe(&self, pipe: &Pipe) -> Result<Value, String> {
        let mut piped = None;
        for command in &pipe.commands {
            piped = Some(self.command(command, piped)?);
        }
        Ok(piped.unwrap_or(Value::Missing))
    }

    fn command(&self, command: &Command, piped: Option<Value>) -> Result<Value, String> {
        let fail = |message: String| {
            let (line, column) = self.position(command.at);
            format!(
                "template: {}:{line}:{column}: executing \"{}\" at <{}>: {message}",
                self.name, self.name, command.text
            )
        };
        let (first, rest) = command
            .args
            .split_first()
            .expect("a command has an argument");
        let Arg::Func(name) = first else {
            if !rest.is_empty() || piped.is_some() {
                return Err(fail(format!(
                    "can't give argument to non-function {}",
                    command.text
                )));
            }
            return self.arg(first).map_err(fail);
        };
        let mut args = Vec::with_capacity(rest.len() + 1);
        // `and` and `or` stop at the first argument that decides.
        if matches!(*name, "and" | "or") {
            let mut last = Value::Missing;
            for arg in rest.iter() {
                last = self.arg(arg).map_err(&fail)?;
                if last.truthy() == (*name == "or") {
                    return Ok(last);
                }
            }
            if let Some(value) = piped {
                return Ok(value);
            }
            return Ok(last);
        }
        for arg in rest {
            args.push(self.arg(arg).map_err(&fail)?);
        }
        args.extend(piped);
        let (_, least, most) = FUNCTIONS
            .iter()
            .find(|(known, ..)| known == name)
            .expect("parsed functions are known");
        if args.len() < *least || most.is_some_and(|most| args.len() > most) {
            return Err(fail(format!(
                "wrong number of args for {name}: want {least} got {}",
                args.len()
            )));
        }
        call(name, args, self.context).map_err(|err| fail(format!("error calling {name}: {err}")))
    }

    /// The line (from 1) and the byte column (from 0) of offset `at`, as Go's errors say them.
    fn position(&self, at: usize) -> (usize, usize) {
        let before = &self.source[..at.min(self.source.len())];
        let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
        (before.matches('\n').count() + 1, at - line_start)
    }

    fn arg(&self, arg: &Arg) -> Result<Value, String> {
        Ok(match arg {
            Arg::Field(name) => match self.context.labels.get(name) {
                Some(value) => Value::Str(value.clone()),
                None => Value::Missing,
            },
            // Go prints a map as `map[k1:v1 k2:v2]`, its keys in order.
            Arg::Dot => Value::Str(format!(
                "map[{}]",
                self.context
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
            Arg::Value(value) => value.clone(),
            Arg::Sub(pipe) => self.pipe(pipe)?,
            Arg::Func(name) => call(name, Vec::new(), self.context)?,
        })
    }
}

fn string_arg(value: &Value) -> Result<String, String> {
    match value {
        Value::Str(text) => Ok(text.clone()),
        Value::Missing => Ok(String::new()),
        other => Err(format!(
            "wrong type for value; expected string; got {}",
            other.kind()
        )),
    }
}

fn int_arg(value: &Value) -> Result<i64, String> {
    match value {
        Value::Int(n) => Ok(*n),
        Value::Float(n) if n.fract() == 0.0 => Ok(*n as i64),
        other => Err(format!(
            "wrong type for value; expected int; got {}",
            other.kind()
        )),
    }
}

/// sprig's `toInt64`: text read as a number (0 when it is none), floats truncated.
fn to_int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        Value::Float(n) => *n as i64,
        Value::Bool(b) => i64::from(*b),
        Value::Str(text) => text
            .parse::<i64>()
            .ok()
            .or_else(|| text.parse::<f64>().ok().filter(|_| false).map(|n| n as i64))
            .unwrap_or(0),
        Value::Time(ns) => *ns,
        Value::Missing => 0,
    }
}

/// sprig's `toFloat64`.
fn to_float(value: &Value) -> f64 {
    match value {
        Value::Int(n) => *n as f64,
        Value::Float(n) => *n,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::Str(text) => text.parse().unwrap_or(0.0),
        Value::Time(ns) => *ns as f64,
        Value::Missing => 0.0,
    }
}

/// The time now, in nanoseconds since the epoch.
fn now() -> i64 {
    chrono::Utc::now().timestamp_nanos_opt().unwrap_or(i64::MAX)
}

/// Loki's `unixToTime`: days, seconds, milliseconds, microseconds or nanoseconds since the epoch,
/// told apart by the number of digits (5, 10, 13, 16 or 19), in Loki's words where it fails.
fn unix_to_time(epoch: &str) -> Result<i64, String> {
    let unable = |why: String| format!("unable to parse time '{epoch}': {why}");
    let number = super::go_numbers::parse_int(epoch).map_err(unable)?;
    let nanos = match epoch.len() {
        5 => number.saturating_mul(86_400_000_000_000),
        10 => number.saturating_mul(1_000_000_000),
        13 => number.saturating_mul(1_000_000),
        16 => number.saturating_mul(1_000),
        19 => number,
        // Loki wraps an error it does not have here, and Go writes the missing one so.
        _ => return Err(unable("%!w(<nil>)".into())),
    };
    Ok(nanos)
}

fn time_arg(value: &Value) -> Result<i64, String> {
    match value {
        Value::Time(ns) => Ok(*ns),
        other => Err(format!(
            "wrong type for value; expected time.Time; got {}",
            other.kind()
        )),
    }
}

fn compile_regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|err| format!("error parsing regexp: {err}"))
}

/// Go's `text/template` comparison of two basic values.
fn compare(a: &Value, b: &Value) -> Result<std::cmp::Ordering, String> {
    use std::cmp::Ordering;
    let text = |v: &Value| match v {
        Value::Str(t) => Some(t.clone()),
        Value::Missing => Some(String::new()),
        _ => None,
    };
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (Value::Float(x), Value::Float(y)) => Ok(x.partial_cmp(y).unwrap_or(Ordering::Equal)),
        (Value::Bool(x), Value::Bool(y)) => Ok(x.cmp(y)),
        _ => match (text(a), text(b)) {
            (Some(x), Some(y)) => Ok(x.cmp(&y)),
            _ => Err("incompatible types for comparison".into()),
        },
    }
}

fn call(name: &str, args: Vec<Value>, context: &Context<'_>) -> Result<Value, String> {
    let s = |at: usize| string_arg(&args[at]);
    let n = |at: usize| int_arg(&args[at]);
    let text = |value: String| Ok(Value::Str(value));
    match name {
        "ToLower" | "lower" => text(s(0)?.to_lowercase()),
        "ToUpper" | "upper" => text(s(0)?.to_uppercase()),
        "title" => text(title(&s(0)?)),
        "Replace" => {
            let (src, old, new, count) = (s(0)?, s(1)?, s(2)?, n(3)?);
            text(if count < 0 {
                src.replace(&old, &new)
            } else {
                src.replacen(&old, &new, count as usize)
            })
        }
        "replace" => text(s(2)?.replace(&s(0)?, &s(1)?)),
        "Trim" => {
            let cut = s(1)?;
            text(s(0)?.trim_matches(|c| cut.contains(c)).to_owned())
        }
        "trimAll" => {
            let cut = s(0)?;
            text(s(1)?.trim_matches(|c| cut.contains(c)).to_owned())
        }
        "TrimLeft" => {
            let cut = s(1)?;
            text(s(0)?.trim_start_matches(|c| cut.contains(c)).to_owned())
        }
        "TrimRight" => {
            let cut = s(1)?;
            text(s(0)?.trim_end_matches(|c| cut.contains(c)).to_owned())
        }
        "TrimPrefix" => {
            let (src, prefix) = (s(0)?, s(1)?);
            text(src.strip_prefix(prefix.as_str()).unwrap_or(&src).to_owned())
        }
        "trimPrefix" => {
            let (prefix, src) = (s(0)?, s(1)?);
            text(src.strip_prefix(prefix.as_str()).unwrap_or(&src).to_owned())
        }
        "TrimSuffix" => {
            let (src, suffix) = (s(0)?, s(1)?);
            text(src.strip_suffix(suffix.as_str()).unwrap_or(&src).to_owned())
        }
        "trimSuffix" => {
            let (suffix, src) = (s(0)?, s(1)?);
            text(src.strip_suffix(suffix.as_str()).unwrap_or(&src).to_owned())
        }
        "TrimSpace" | "trim" => text(s(0)?.trim().to_owned()),
        "regexReplaceAll" => {
            let re = compile_regex(&s(0)?)?;
            // Go's `$1` and `${name}` are the `regex` crate's too.
            text(re.replace_all(&s(1)?, s(2)?.as_str()).into_owned())
        }
        "regexReplaceAllLiteral" => {
            let re = compile_regex(&s(0)?)?;
            text(re.replace_all(&s(1)?, regex::NoExpand(&s(2)?)).into_owned())
        }
        "count" => {
            let re = compile_regex(&s(0)?)?;
            Ok(Value::Int(re.find_iter(&s(1)?).count() as i64))
        }
        "urlencode" => text(query_escape(&s(0)?)),
        "urldecode" => query_unescape(&s(0)?).map(Value::Str),
        "bytes" => super::go_numbers::parse_bytes(&s(0)?).map(|bytes| Value::Float(bytes as f64)),
        "duration" | "duration_seconds" => {
            let value = s(0)?;
            super::lexer::duration(&value)
                .map(|d| Value::Float(d.as_secs_f64()))
                .ok_or_else(|| format!("time: invalid duration {value:?}"))
        }
        "unixEpoch" => Ok(Value::Str(
            (time_arg(&args[0])?.div_euclid(1_000_000_000)).to_string(),
        )),
        "unixEpochMillis" => Ok(Value::Str(
            (time_arg(&args[0])?.div_euclid(1_000_000)).to_string(),
        )),
        "unixEpochNanos" => Ok(Value::Str(time_arg(&args[0])?.to_string())),
        "unixToTime" => unix_to_time(&s(0)?).map(Value::Time),
        // sprig's `date`: a number is seconds since the epoch, and what is no time is now.
        "date" => {
            let nanos = match &args[1] {
                Value::Time(nanos) => *nanos,
                Value::Int(seconds) => seconds.saturating_mul(1_000_000_000),
                _ => now(),
            };
            text(go_time::format(nanos, &s(0)?))
        }
        "now" => Ok(Value::Time(now())),
        "alignLeft" | "alignRight" => {
            let (count, src) = (n(0)?, s(1)?);
            let chars: Vec<char> = src.chars().collect();
            let len = chars.len() as i64;
            if count < 0 || count == len {
                return text(src);
            }
            let count = count as usize;
            let pad = " ".repeat(count.saturating_sub(chars.len()));
            text(match (name, count > chars.len()) {
                ("alignLeft", true) => src + &pad,
                ("alignLeft", false) => chars[..count].iter().collect(),
                (_, true) => pad + &src,
                (_, false) => chars[chars.len() - count..].iter().collect(),
            })
        }
        "__line__" => text(context.line.to_owned()),
        "__timestamp__" => Ok(Value::Time(context.timestamp)),
        "b64enc" => text(base64::engine::general_purpose::STANDARD.encode(s(0)?)),
        "b64dec" => text(
            base64::engine::general_purpose::STANDARD
                .decode(s(0)?)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|err| err.to_string()),
        ),
        "trunc" => {
            // sprig cuts bytes, not characters.
            let (c, src) = (n(0)?, s(1)?);
            let len = src.len() as i64;
            let bytes = src.as_bytes();
            text(if c < 0 && len + c > 0 {
                String::from_utf8_lossy(&bytes[(len + c) as usize..]).into_owned()
            } else if c >= 0 && len > c {
                String::from_utf8_lossy(&bytes[..c as usize]).into_owned()
            } else {
                src
            })
        }
        "substr" => {
            let (start, end, src) = (n(0)?, n(1)?, s(2)?);
            let len = src.len() as i64;
            let bytes = src.as_bytes();
            let slice = |from: i64, to: i64| {
                if from < 0 || to < from || to > len {
                    Err(format!(
                        "runtime error: slice bounds out of range [{from}:{to}]"
                    ))
                } else {
                    Ok(String::from_utf8_lossy(&bytes[from as usize..to as usize]).into_owned())
                }
            };
            if start < 0 {
                return slice(0, end).map(Value::Str);
            }
            if end < 0 || end > len {
                if start > len {
                    return Err(format!(
                        "runtime error: slice bounds out of range [{start}:{len}]"
                    ));
                }
                return slice(start, len).map(Value::Str);
            }
            if start > end {
                return Err(format!(
                    "runtime error: slice bounds out of range [{start}:{end}]"
                ));
            }
            slice(start, end).map(Value::Str)
        }
        "contains" => Ok(Value::Bool(s(1)?.contains(&s(0)?))),
        "hasPrefix" => Ok(Value::Bool(s(1)?.starts_with(&s(0)?))),
        "hasSuffix" => Ok(Value::Bool(s(1)?.ends_with(&s(0)?))),
        "indent" | "nindent" => {
            let pad = " ".repeat(n(0)?.max(0) as usize);
            let indented = format!("{pad}{}", s(1)?.replace('\n', &format!("\n{pad}")));
            text(if name == "nindent" {
                format!("\n{indented}")
            } else {
                indented
            })
        }
        "repeat" => text(s(1)?.repeat(n(0)?.max(0) as usize)),
        "int" => Ok(Value::Int(to_int(&args[0]))),
        "float64" => Ok(Value::Float(to_float(&args[0]))),
        "add" => Ok(Value::Int(
            args.iter().map(to_int).fold(0i64, i64::wrapping_add),
        )),
        "mul" => Ok(Value::Int(
            args.iter().map(to_int).fold(1i64, i64::wrapping_mul),
        )),
        "sub" => Ok(Value::Int(to_int(&args[0]).wrapping_sub(to_int(&args[1])))),
        "div" | "mod" => {
            let (a, b) = (to_int(&args[0]), to_int(&args[1]));
            if b == 0 {
                return Err("runtime error: integer divide by zero".into());
            }
            Ok(Value::Int(if name == "div" {
                a.wrapping_div(b)
            } else {
                a.wrapping_rem(b)
            }))
        }
        "addf" => Ok(Value::Float(args.iter().map(to_float).sum())),
        "mulf" => Ok(Value::Float(args.iter().map(to_float).product())),
        "subf" | "divf" => {
            let mut values = args.iter().map(to_float);
            let first = values.next().unwrap_or(0.0);
            Ok(Value::Float(values.fold(first, |acc, v| {
                if name == "subf" {
                    acc - v
                } else {
                    acc / v
                }
            })))
        }
        "max" => Ok(Value::Int(args.iter().map(to_int).max().unwrap_or(0))),
        "min" => Ok(Value::Int(args.iter().map(to_int).min().unwrap_or(0))),
        "maxf" => Ok(Value::Float(
            args.iter().map(to_float).fold(f64::MIN, f64::max),
        )),
        "minf" => Ok(Value::Float(
            args.iter().map(to_float).fold(f64::MAX, f64::min),
        )),
        "ceil" => Ok(Value::Float(to_float(&args[0]).ceil())),
        "floor" => Ok(Value::Float(to_float(&args[0]).floor())),
        "round" => {
            let value = to_float(&args[0]);
            let places = to_int(&args[1]);
            let half = args.get(2).map_or(0.5, to_float);
            let scale = 10f64.powi(places as i32);
            let digits = value * scale;
            let rounded = if digits.fract().abs() >= half {
                digits.trunc() + digits.signum()
            } else {
                digits.trunc()
            };
            Ok(Value::Float(rounded / scale))
        }
        "default" => {
            let given = args.get(1).filter(|value| value.truthy());
            Ok(given.cloned().unwrap_or_else(|| args[0].clone()))
        }
        "eq" => {
            let first = &args[0];
            if args.len() < 2 {
                return Err("missing argument for comparison".into());
            }
            for other in &args[1..] {
                if compare(first, other)? == std::cmp::Ordering::Equal {
                    return Ok(Value::Bool(true));
                }
            }
            Ok(Value::Bool(false))
        }
        "ne" => Ok(Value::Bool(
            compare(&args[0], &args[1])? != std::cmp::Ordering::Equal,
        )),
        "lt" => Ok(Value::Bool(compare(&args[0], &args[1])?.is_lt())),
        "le" => Ok(Value::Bool(compare(&args[0], &args[1])?.is_le())),
        "gt" => Ok(Value::Bool(compare(&args[0], &args[1])?.is_gt())),
        "ge" => Ok(Value::Bool(compare(&args[0], &args[1])?.is_ge())),
        "not" => Ok(Value::Bool(!args[0].truthy())),
        "len" => match &args[0] {
            Value::Str(text) => Ok(Value::Int(text.len() as i64)),
            Value::Missing => Ok(Value::Int(0)),
            other => Err(format!("len of type {}", other.kind())),
        },
        "print" => {
            // Go's Sprint puts a space between two operands when neither is a string.
            let mut out = String::new();
            for (at, value) in args.iter().enumerate() {
                let is_text = |v: &Value| matches!(v, Value::Str(_) | Value::Missing);
                if at > 0 && !is_text(value) && !is_text(&args[at - 1]) {
                    out.push(' ');
                }
                value.print(&mut out);
            }
            text(out)
        }
        "println" => text(args.iter().map(Value::text).collect::<Vec<_>>().join(" ") + "\n"),
        "printf" => text(printf(&s(0)?, &args[1..])),
        _ => Err(format!("function {name:?} not defined")),
    }
}

/// Go's `strings.Title`: each letter after a separator upper-cased.
fn title(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut previous = ' ';
    for c in text.chars() {
        let separator = if c.is_ascii() {
            !(previous.is_ascii_alphanumeric() || previous == '_')
        } else {
            previous.is_whitespace()
        };
        let separator = if previous.is_ascii() {
            separator
        } else {
            previous.is_whitespace()
        };
        if separator {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        previous = c;
    }
    out
}

/// Go's `url.QueryEscape`.
fn query_escape(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            other => {
                let _ = write!(out, "%{other:02X}");
            }
        }
    }
    out
}

/// Go's `url.QueryUnescape`.
fn query_unescape(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = text
                    .get(at + 1..at + 3)
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                    .ok_or_else(|| {
                        format!(
                            "invalid URL escape {:?}",
                            text.get(at..(at + 3).min(text.len())).unwrap_or("%")
                        )
                    })?;
                out.push(hex);
                at += 2;
            }
            other => out.push(other),
        }
        at += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `fmt.Sprintf` for the verbs templates use: `%s %v %d %q %f %e %g %x %X %t %%`, with
/// flags `-`, `0`, `+`, a width and a precision.
fn printf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (mut left, mut zero, mut plus) = (false, false, false);
        while let Some(&flag) = chars.peek() {
            match flag {
                '-' => left = true,
                '0' => zero = true,
                '+' => plus = true,
                ' ' | '#' => {}
                _ => break,
            }
            chars.next();
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        let mut precision = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut digits = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                digits.push(d);
                chars.next();
            }
            precision = Some(digits.parse::<usize>().unwrap_or(0));
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        let body = match (verb, arg) {
            ('v' | 's', Value::Str(_) | Value::Missing) => {
                let text = arg.text();
                match precision {
                    Some(p) => text.chars().take(p).collect(),
                    None => text,
                }
            }
            ('v', _) => arg.text(),
            ('q', Value::Str(_) | Value::Missing) => format!("{:?}", arg.text()),
            ('d', Value::Int(n)) => {
                if plus && *n >= 0 {
                    format!("+{n}")
                } else {
                    n.to_string()
                }
            }
            ('x', Value::Int(n)) => format!("{n:x}"),
            ('X', Value::Int(n)) => format!("{n:X}"),
            ('x', Value::Str(t)) => t.bytes().map(|b| format!("{b:02x}")).collect(),
            ('f' | 'F', Value::Float(n)) => format!("{n:.*}", precision.unwrap_or(6)),
            ('f' | 'F', Value::Int(n)) => format!("%!f(int={n})"),
            ('e', Value::Float(n)) => {
                let text = format!("{n:.*e}", precision.unwrap_or(6));
                let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
                let exponent: i32 = exponent.parse().unwrap_or(0);
                let sign = if exponent < 0 { '-' } else { '+' };
                format!("{mantissa}e{sign}{:02}", exponent.abs())
            }
            ('g', Value::Float(n)) => go_float(*n),
            ('t', Value::Bool(b)) => b.to_string(),
            _ => format!("%!{verb}({}={})", arg.kind(), arg.text()),
        };
        let width: usize = width.parse().unwrap_or(0);
        let len = body.chars().count();
        if len >= width {
            out.push_str(&body);
        } else if left {
            out.push_str(&body);
            out.push_str(&" ".repeat(width - len));
        } else if zero && !matches!(arg, Value::Str(_) | Value::Missing) {
            let (sign, digits) = match body.strip_prefix('-') {
                Some(rest) => ("-", rest),
                None => ("", body.as_str()),
            };
            out.push_str(sign);
            out.push_str(&"0".repeat(width - len));
            out.push_str(digits);
        } else {
            out.push_str(&" ".repeat(width - len));
            out.push_str(&body);
        }
    }
    for extra in args {
        let _ = write!(out, "%!(EXTRA {}={})", extra.kind(), extra.text());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's `%v` of these floats, as Loki 3.7.6 writes `{{ bytes "…" }}` in a line.
    #[test]
    fn floats_print_as_go_prints_them() {
        for (n, go) in [
            (1_500_000.0, "1.5e+06"),
            (1_234_567.0, "1.234567e+06"),
            (999_999.0, "999999"),
            (100_000.0, "100000"),
            (1e10, "1e+10"),
            (1e18, "1e+18"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e7, "-2.5e+07"),
            (0.0, "0"),
        ] {
            assert_eq!(go_float(n), go, "{n}");
        }
        assert_eq!(
            render(
                r#"{{ bytes "1,5 k" }} {{ bytes "3.7" }} {{ .s | bytes }}"#,
                &[("s", "1.5MB")]
            ),
            Ok("15000 3 1.5e+06".to_string())
        );
        assert_eq!(
            render(r#"{{ bytes "7 zz" }}"#, &[]).unwrap_err(),
            r#"template: line:1:3: executing "line" at <bytes "7 zz">: error calling bytes: unhandled size name: zz"#
        );
    }

    fn render(template: &str, labels: &[(&str, &str)]) -> Result<String, String> {
        let labels: Labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let context = Context {
            labels: &labels,
            line: "the line",
            timestamp: 1_700_000_000_123_456_789,
        };
        Template::parse("line", template)
            .map_err(|err| err.to_string())?
            .render(&context)
    }

    const LABELS: &[(&str, &str)] = &[
        ("level", "error"),
        ("msg", "Hello World"),
        ("path", "/api/v1"),
        ("n", "42"),
        ("f", "1.5"),
        ("Mixed", "CaSe"),
    ];

    /// Loki 3.7.6's output for these templates on `level=error msg="Hello World" path=/api/v1
    /// n=42 f=1.5 e= Mixed=CaSe | logfmt`.
    #[test]
    fn text_functions_answer_as_lokis() {
        let cases = [
            ("{{.msg | ToUpper}}", "HELLO WORLD"),
            ("{{ToLower .msg}}", "hello world"),
            ("{{.msg | lower}}", "hello world"),
            ("{{ upper .msg }}", "HELLO WORLD"),
            ("{{ title \"hello world\" }}", "Hello World"),
            ("{{ .msg | trunc 3 }}", "Hel"),
            ("{{ trunc -3 .msg }}", "rld"),
            ("{{ substr 1 4 .msg }}", "ell"),
            ("{{ replace \"l\" \"L\" .msg }}", "HeLLo WorLd"),
            ("{{ Replace .msg \"o\" \"0\" 1 }}", "Hell0 World"),
            ("{{ trim \"  x  \" }}", "x"),
            ("{{ trimPrefix \"/\" .path }}", "api/v1"),
            ("{{ trimSuffix \"v1\" .path }}", "/api/"),
            ("{{ default \"dflt\" .e }}", "dflt"),
            ("{{ default \"dflt\" .msg }}", "Hello World"),
            ("{{ printf \"%s=%d\" .level 5 }}", "error=5"),
            (
                "{{ regexReplaceAll \"(o)\" .msg \"[$1]\" }}",
                "Hell[o] W[o]rld",
            ),
            (
                "{{ regexReplaceAllLiteral \"o\" .msg \"$1\" }}",
                "Hell$1 W$1rld",
            ),
            ("{{ contains \"World\" .msg }}", "true"),
            ("{{ hasPrefix \"He\" .msg }}", "true"),
            ("{{ hasSuffix \"x\" .msg }}", "false"),
            ("{{ repeat 2 .level }}", "errorerror"),
            ("{{ indent 2 .level }}", "  error"),
            ("{{ nindent 2 .level }}", "\n  error"),
            ("{{ if eq .level \"error\" }}E{{ else }}N{{ end }}", "E"),
            ("{{ if .e }}yes{{ else if .n }}n{{ end }}", "n"),
            ("{{ TrimSpace \" a \" }}", "a"),
            ("{{ Trim .path \"/\" }}", "api/v1"),
            ("{{ TrimLeft .path \"/a\" }}", "pi/v1"),
            ("{{ .Mixed | lower }}", "case"),
            ("{{ add 1 .n }}", "43"),
            ("{{ len .msg }}", "11"),
            ("{{ count \"l\" .msg }}", "3"),
            ("{{ urlencode \"a b&c\" }}", "a+b%26c"),
            ("{{ trimAll \"/\" .path }}", "api/v1"),
            ("{{ alignLeft 7 .level }}", "error  "),
            ("{{ alignRight 7 .level }}", "  error"),
            ("{{ b64enc .level }}", "ZXJyb3I="),
            ("{{ .n | int | add 3 }}", "45"),
            ("{{ mul .n 2 }}", "84"),
            ("{{ div .n 5 }}", "8"),
            ("{{ addf .f 1 }}", "2.5"),
            ("{{ max 1 5 3 }}", "5"),
            ("{{ round 1.55 1 }}", "1.6"),
            ("{{ ceil 1.2 }}", "2"),
            ("{{ float64 .f }}", "1.5"),
            ("{{ .nothere }}", ""),
            (
                "{{ printf \"%v %q %5s|%-4s|%.2f %x\" .n .msg .level .n 3.14159 255 }}",
                "42 \"Hello World\" error|42  |3.14 ff",
            ),
            ("{{ __line__ | trunc 5 }}", "the l"),
            ("{{ .msg | substr 0 50 }}", "Hello World"),
            ("{{ \"A\" }}{{- \"  B\" -}}  {{ 12 }}", "A  B12"),
            ("{{ not .e }}", "true"),
            ("{{ and .n .e }}", ""),
            ("{{ or .e .n }}", "42"),
            ("{{ ne .n \"42\" }}", "false"),
            ("{{ title .msg }}", "Hello World"),
            ("{{/* a comment */}}x", "x"),
            ("{{ __timestamp__ | unixEpochMillis }}", "1700000000123"),
            // Loki 3.7.6's answers.
            (
                "{{ __timestamp__ }}",
                "2023-11-14 22:13:20.123456789 +0000 UTC",
            ),
            (
                "{{ __timestamp__ | date \"2006-01-02T15:04:05.000Z07:00\" }}",
                "2023-11-14T22:13:20.123Z",
            ),
            (
                "{{ unixToTime \"1700000000\" | date \"2006-01-02 15:04:05\" }}",
                "2023-11-14 22:13:20",
            ),
            (
                "{{ unixToTime \"1700000000123\" }}",
                "2023-11-14 22:13:20.123 +0000 UTC",
            ),
            ("{{ unixToTime \"19675\" | date \"Jan 2\" }}", "Nov 14"),
            ("{{ date \"15:04\" (int \"60\") }}", "00:01"),
            (
                "{{ unixToTime \"1700000000123456\" }}",
                "2023-11-14 22:13:20.123456 +0000 UTC",
            ),
            (
                "{{ unixToTime \"+170000000\" }}",
                "1975-05-22 14:13:20 +0000 UTC",
            ),
            ("{{ date \"15:04\" \"no time\" | len }}", "5"),
        ];
        for (template, want) in cases {
            assert_eq!(render(template, LABELS).as_deref(), Ok(want), "{template}");
        }
    }

    #[test]
    fn a_call_that_fails_says_so_as_go_does() {
        let err = render("{{ unixToTime \"abc\" }}", &[]).unwrap_err();
        assert!(
            err.ends_with("error calling unixToTime: unable to parse time 'abc': strconv.ParseInt: parsing \"abc\": invalid syntax"),
            "{err}"
        );
        let err = render("{{ unixToTime \"123\" }}", &[]).unwrap_err();
        assert!(
            err.ends_with("error calling unixToTime: unable to parse time '123': %!w(<nil>)"),
            "{err}"
        );
        let err = render("{{ substr 1 4 .msg }}", &[]).unwrap_err();
        assert!(
            err.ends_with("error calling substr: runtime error: slice bounds out of range [1:0]"),
            "{err}"
        );
        assert!(err.starts_with("template: line:"), "{err}");
        let err = render("{{ gt .n 5 }}", LABELS).unwrap_err();
        assert!(err.contains("incompatible types for comparison"), "{err}");
    }

    #[test]
    fn what_is_not_supported_is_refused_by_name() {
        let refused = |template: &str| Template::parse("line", template).unwrap_err().to_string();
        assert!(refused("{{ fromJson .a }}").contains("\"fromJson\""));
        assert!(refused("{{ toDate \"2006\" \"2024\" }}").contains("\"toDate\""));
        assert!(refused("{{ range .a }}{{ end }}").contains("range"));
        assert!(refused("{{ if .a }}x").contains("without {{end}}"));
        assert!(refused("{{ .a ").contains("unclosed"));
    }

    #[test]
    fn a_single_label_is_known() {
        let template = Template::parse("line", "{{ .message }}").unwrap();
        assert_eq!(template.single_label(), Some("message"));
        assert_eq!(
            Template::parse("line", "x{{ .m }}").unwrap().single_label(),
            None
        );
    }
}
