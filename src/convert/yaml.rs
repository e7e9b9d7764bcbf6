//! A small YAML writer for the documents `convert` produces: block mappings and sequences whose
//! fields and items can carry comment lines, so that notes land next to the field they are about.
//! Scalars are quoted the way serde_yaml_ng quotes them; multi-line strings become literal blocks.
//! Pure: text in, text out.

/// A YAML value with the comments that go above its parts.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// A string, quoted only where YAML needs it.
    Str(String),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A block mapping, in the order given.
    Map(Vec<Field>),
    /// A block sequence of items, each with its own comment lines.
    Seq(Vec<Item>),
}

/// One key of a mapping, with the comment lines written above it.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// Comment lines (without `# `) written above the key.
    pub notes: Vec<String>,
    /// The key.
    pub key: String,
    /// The value.
    pub value: Node,
}

/// One item of a sequence, with the comment lines written above it.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// Comment lines (without `# `) written above the item.
    pub notes: Vec<String>,
    /// The value.
    pub value: Node,
}

/// A mapping built field by field.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MapBuilder(Vec<Field>);

impl MapBuilder {
    /// An empty mapping.
    pub fn new() -> Self {
        MapBuilder(Vec::new())
    }

    /// Adds `key: value`.
    pub fn field(&mut self, key: &str, value: Node) -> &mut Self {
        self.noted(key, value, Vec::new())
    }

    /// Adds `key: value` with comment lines above it.
    pub fn noted(&mut self, key: &str, value: Node, notes: Vec<String>) -> &mut Self {
        self.0.push(Field {
            notes,
            key: key.to_string(),
            value,
        });
        self
    }

    /// True when no field was added.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The mapping.
    pub fn build(self) -> Node {
        Node::Map(self.0)
    }
}

impl Node {
    /// A string node.
    pub fn str(s: impl Into<String>) -> Node {
        Node::Str(s.into())
    }

    /// A mapping of strings to strings, in key order.
    pub fn string_map<'a>(pairs: impl IntoIterator<Item = (&'a String, &'a String)>) -> Node {
        Node::Map(
            pairs
                .into_iter()
                .map(|(k, v)| Field {
                    notes: Vec::new(),
                    key: k.clone(),
                    value: Node::str(v.clone()),
                })
                .collect(),
        )
    }

    /// A sequence of strings.
    pub fn string_seq<'a>(values: impl IntoIterator<Item = &'a String>) -> Node {
        Node::Seq(values.into_iter().map(|v| Item::plain(Node::str(v.clone()))).collect())
    }
}

impl Item {
    /// An item without comments.
    pub fn plain(value: Node) -> Item {
        Item { notes: Vec::new(), value }
    }
}

/// One YAML document: comment lines at its top, then the root mapping.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// Comment lines (without `# `) above the document's first key.
    pub header: Vec<String>,
    /// The root node (a mapping).
    pub root: Node,
}

/// The documents as one multi-document YAML stream, separated by `---`.
pub fn render_stream(documents: &[Document]) -> String {
    documents.iter().map(render_document).collect::<Vec<_>>().join("---\n")
}

/// One document's text, ending with a newline.
pub fn render_document(document: &Document) -> String {
    let mut out = String::new();
    comments(&mut out, 0, &document.header);
    match &document.root {
        Node::Map(fields) if !fields.is_empty() => map(&mut out, 0, fields),
        other => {
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
    out
}

/// The documents as one JSON `List` (`apiVersion: v1, kind: List`, `items`), pretty-printed and
/// ending with a newline: `kubectl apply -f` takes it as the objects it holds. JSON has no
/// comments: `notes` gives them.
pub fn render_json_list(documents: &[Document]) -> String {
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": documents.iter().map(|d| json(&d.root)).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&list).expect("JSON values always serialize") + "\n"
}

/// A node as a JSON value (comments dropped).
pub fn json(node: &Node) -> serde_json::Value {
    use serde_json::Value;
    match node {
        Node::Str(s) => Value::String(s.clone()),
        Node::Int(i) => Value::from(*i),
        Node::Bool(b) => Value::Bool(*b),
        Node::Map(fields) => Value::Object(fields.iter().map(|f| (f.key.clone(), json(&f.value))).collect()),
        Node::Seq(items) => Value::Array(items.iter().map(|i| json(&i.value)).collect()),
    }
}

/// Every comment of `document` as one line, headed by the object (`NodePool "default"`) and, for
/// a comment above a field or item, its path (`spec.template.spec.requirements[1]`); the lines of
/// a multi-line comment are joined with ` / `.
pub fn notes(document: &Document) -> Vec<String> {
    let field = |key: &str| match &document.root {
        Node::Map(fields) => fields.iter().find(|f| f.key == key).map(|f| &f.value),
        _ => None,
    };
    let kind = match field("kind") {
        Some(Node::Str(kind)) => kind.clone(),
        _ => "object".to_string(),
    };
    let name = match field("metadata") {
        Some(Node::Map(fields)) => fields.iter().find(|f| f.key == "name").and_then(|f| match &f.value {
            Node::Str(name) => Some(name.clone()),
            _ => None,
        }),
        _ => None,
    };
    let object = match name {
        Some(name) => format!("{kind} {name:?}"),
        None => kind,
    };
    let mut out = Vec::new();
    let mut add = |path: &str, notes: &[String]| {
        for note in notes {
            let text = note
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" / ");
            out.push(if path.is_empty() {
                format!("{object}: {text}")
            } else {
                format!("{object} {path}: {text}")
            });
        }
    };
    add("", &document.header);
    node_notes(&document.root, "", &mut add);
    out
}

fn node_notes(node: &Node, path: &str, add: &mut impl FnMut(&str, &[String])) {
    match node {
        Node::Map(fields) => {
            for f in fields {
                let here = if path.is_empty() {
                    f.key.clone()
                } else {
                    format!("{path}.{}", f.key)
                };
                add(&here, &f.notes);
                node_notes(&f.value, &here, add);
            }
        }
        Node::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                let here = format!("{path}[{i}]");
                add(&here, &item.notes);
                node_notes(&item.value, &here, add);
            }
        }
        Node::Str(_) | Node::Int(_) | Node::Bool(_) => {}
    }
}

fn comments(out: &mut String, indent: usize, notes: &[String]) {
    for note in notes {
        for line in note.lines() {
            push_indent(out, indent);
            if line.is_empty() {
                out.push_str("#\n");
            } else {
                out.push_str("# ");
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}

fn push_indent(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn map(out: &mut String, indent: usize, fields: &[Field]) {
    for f in fields {
        comments(out, indent, &f.notes);
        push_indent(out, indent);
        out.push_str(&scalar(&f.key));
        out.push(':');
        value(out, indent, &f.value);
    }
}

/// Writes what follows `key:` or `- `: an inline scalar, a literal block, or a nested block.
fn value(out: &mut String, indent: usize, node: &Node) {
    match node {
        Node::Map(fields) if !fields.is_empty() => {
            out.push('\n');
            map(out, indent + 2, fields);
        }
        Node::Seq(items) if !items.is_empty() => {
            out.push('\n');
            seq(out, indent + 2, items);
        }
        Node::Str(s) if is_block_literal(s) => literal(out, indent + 2, s),
        other => {
            out.push(' ');
            out.push_str(&inline(other));
            out.push('\n');
        }
    }
}

fn seq(out: &mut String, indent: usize, items: &[Item]) {
    for item in items {
        comments(out, indent, &item.notes);
        match &item.value {
            Node::Map(fields) if !fields.is_empty() => {
                // The first field shares the dash's line; its comments go above the dash.
                let mut nested = String::new();
                map(&mut nested, indent + 2, fields);
                let mut first = true;
                for line in nested.lines() {
                    let is_comment = line.trim_start().starts_with('#');
                    if first && !is_comment {
                        push_indent(out, indent);
                        out.push_str("- ");
                        out.push_str(&line[indent + 2..]);
                        first = false;
                    } else if first {
                        // A comment on the first field stands above the dash, at its indentation.
                        push_indent(out, indent);
                        out.push_str(line.trim_start());
                    } else {
                        out.push_str(line);
                    }
                    out.push('\n');
                }
            }
            Node::Seq(nested) if !nested.is_empty() => {
                push_indent(out, indent);
                out.push('-');
                value(out, indent, &Node::Seq(nested.clone()));
            }
            other => {
                // Scalars stay on the dash's line (a multi-line string as a quoted scalar).
                push_indent(out, indent);
                out.push_str("- ");
                out.push_str(&inline(other));
                out.push('\n');
            }
        }
    }
}

fn inline(node: &Node) -> String {
    match node {
        Node::Str(s) => scalar(s),
        Node::Int(i) => i.to_string(),
        Node::Bool(b) => b.to_string(),
        Node::Map(_) => "{}".to_string(),
        Node::Seq(_) => "[]".to_string(),
    }
}

/// A single-line string as serde_yaml_ng would write it (plain where unambiguous, else quoted),
/// also quoted where a YAML 1.1 reader such as kubectl's would take the plain scalar for a
/// boolean, number or timestamp (`yes`, `off`, `1_000`, `2001-12-14`); anything serde_yaml_ng would
/// not keep on one line is written as a JSON string, which YAML reads as a double-quoted scalar.
fn scalar(s: &str) -> String {
    let json = || serde_json::to_string(s).expect("a string always serializes");
    match serde_yaml_ng::to_string(s) {
        Ok(text) => {
            let text = text.strip_suffix('\n').unwrap_or(&text);
            if text.contains('\n') {
                json()
            } else if !text.starts_with(['\'', '"']) && is_yaml11_typed(s) {
                format!("'{}'", s.replace('\'', "''"))
            } else {
                text.to_string()
            }
        }
        Err(_) => json(),
    }
}

/// Whether YAML 1.1 would read the plain scalar `s` as something other than a string: its
/// booleans and nulls, and (generously) anything made of a number's or a timestamp's characters
/// that starts like one.
fn is_yaml11_typed(s: &str) -> bool {
    const WORDS: &[&str] = &["y", "yes", "n", "no", "true", "false", "on", "off", "null", "~"];
    if WORDS.contains(&s.to_ascii_lowercase().as_str()) {
        return true;
    }
    let starts_like_a_number = s.starts_with(|c: char| c.is_ascii_digit() || "+-.".contains(c));
    starts_like_a_number && s.chars().all(|c| c.is_ascii_hexdigit() || "xXoObB_.:+-eE tTzZ".contains(c))
}

/// Multi-line text that a literal block keeps byte for byte: no carriage returns, tabs or other
/// control characters, no trailing spaces on a line, and not only line breaks.
fn is_block_literal(s: &str) -> bool {
    s.contains('\n') && !s.trim().is_empty() && !s.chars().any(|c| c.is_control() && c != '\n') && s.lines().all(|l| !l.ends_with(' '))
}

fn literal(out: &mut String, indent: usize, s: &str) {
    let body = s.trim_end_matches('\n');
    let trailing = s.len() - body.len();
    let chomp = match trailing {
        0 => "-",
        1 => "",
        _ => "+",
    };
    // A first line that starts with a space needs an explicit indentation indicator.
    let indicator = if body.starts_with(' ') { "2" } else { "" };
    out.push_str(&format!(" |{indicator}{chomp}\n"));
    for line in body.split('\n') {
        if !line.is_empty() {
            push_indent(out, indent);
            out.push_str(line);
        }
        out.push('\n');
    }
    for _ in 1..trailing {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests;
