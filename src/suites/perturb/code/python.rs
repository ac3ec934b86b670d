//! Python source as a parse tree (tree-sitter's Python grammar): what the code families read to
//! find names, docstrings and indentation, so a rename is a rename of identifiers and never a
//! string replace, and a reformat moves whitespace only where Python ignores it.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;

use tree_sitter::{Node, Parser, Tree};

/// A byte range of a text and what replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub range: Range<usize>,
    pub text: String,
}

/// `text` with `edits` (non-overlapping) made.
pub fn apply(text: &str, edits: &[Edit]) -> String {
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| std::cmp::Reverse(e.range.start));
    let mut out = text.to_owned();
    for e in sorted {
        out.replace_range(e.range.clone(), &e.text);
    }
    out
}

/// Names Python binds without a definition in the source: never renamed, never chosen.
pub const BUILTINS: &[&str] = &[
    "abs",
    "aiter",
    "all",
    "anext",
    "any",
    "ascii",
    "bin",
    "bool",
    "breakpoint",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "classmethod",
    "compile",
    "complex",
    "copyright",
    "credits",
    "delattr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "exit",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "hex",
    "id",
    "input",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "license",
    "list",
    "locals",
    "map",
    "max",
    "memoryview",
    "min",
    "next",
    "object",
    "oct",
    "open",
    "ord",
    "pow",
    "print",
    "property",
    "quit",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "self",
    "cls",
    "Ellipsis",
    "NotImplemented",
    "Exception",
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "StopIteration",
    "AssertionError",
    "ZeroDivisionError",
    "RuntimeError",
    "__name__",
    "__file__",
];

/// Python's keywords and soft keywords: never chosen as a new name.
pub const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def",
    "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is",
    "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "_",
    "case", "match", "type",
];

/// A parsed Python source that has no syntax error.
pub struct Source {
    pub text: String,
    tree: Tree,
}

impl Source {
    /// `None` when the text does not parse cleanly: nothing is perturbed in code we cannot read.
    pub fn parse(text: impl Into<String>) -> Option<Self> {
        let text = text.into();
        let mut parser = Parser::new();
        parser.set_language(&tree_sitter_python::LANGUAGE.into()).expect("the grammar matches tree-sitter");
        let tree = parser.parse(&text, None)?;
        (!tree.root_node().has_error()).then_some(Self { text, tree })
    }

    pub fn root(&self) -> Node<'_> {
        self.tree.root_node()
    }

    pub fn text_of(&self, node: Node<'_>) -> &str {
        &self.text[node.byte_range()]
    }

    /// Every node under `node`, itself first, in source order.
    pub fn nodes<'t>(&'t self, node: Node<'t>) -> Vec<Node<'t>> {
        let mut out = Vec::new();
        let mut cursor = node.walk();
        loop {
            out.push(cursor.node());
            if cursor.goto_first_child() {
                continue;
            }
            loop {
                if cursor.node() == node {
                    return out;
                }
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return out;
                }
            }
        }
    }

    /// Every node with its parent, grandparent and field there, and whether a string literal
    /// encloses it, in one walk (tree-sitter finds a node's parent by walking down from the
    /// root, which deep nesting would make quadratic).
    pub fn visits(&self) -> Vec<Visit<'_>> {
        let mut out = Vec::new();
        let mut cursor = self.root().walk();
        // The cursor's ancestors, each with whether it is or is inside a string.
        let mut stack: Vec<(Node<'_>, bool)> = Vec::new();
        loop {
            let node = cursor.node();
            let in_string = stack.last().is_some_and(|&(_, s)| s);
            out.push(Visit {
                node,
                parent: stack.last().map(|p| p.0),
                grandparent: stack.len().checked_sub(2).map(|i| stack[i].0),
                field: cursor.field_name(),
                in_string,
            });
            if cursor.goto_first_child() {
                stack.push((node, in_string || node.kind() == "string"));
                continue;
            }
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return out;
                }
                stack.pop();
            }
        }
    }

    /// The tree's structure (each node's field and kind, its children inside), with every
    /// leaf's text when `texts`: two sources with the same shape and texts differ in
    /// insignificant whitespace only. Written with a cursor, not recursion, as the nesting of a
    /// row's code has no bound.
    pub fn shape(&self, texts: bool) -> String {
        let mut out = String::new();
        let mut cursor = self.root().walk();
        loop {
            let node = cursor.node();
            out.push('(');
            out.push_str(cursor.field_name().unwrap_or(""));
            out.push(':');
            out.push_str(node.kind());
            if texts && node.child_count() == 0 {
                out.push(' ');
                out.push_str(self.text_of(node));
            }
            if cursor.goto_first_child() {
                continue;
            }
            out.push(')');
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return out;
                }
                out.push(')');
            }
        }
    }

    /// Every identifier's text.
    pub fn identifiers(&self) -> BTreeSet<String> {
        self.nodes(self.root())
            .into_iter()
            .filter(|n| n.kind() == "identifier")
            .map(|n| self.text_of(n).to_owned())
            .collect()
    }

    /// The names of the module's own functions, in order (decorated ones too).
    pub fn top_functions(&self) -> Vec<String> {
        let root = self.root();
        let mut cursor = root.walk();
        root.named_children(&mut cursor)
            .filter_map(|n| function_of(n))
            .filter_map(|f| f.child_by_field_name("name"))
            .map(|n| self.text_of(n).to_owned())
            .collect()
    }

    /// The last module-level definition of function `name` (the one that counts).
    pub fn function(&self, name: &str) -> Option<Node<'_>> {
        let root = self.root();
        let mut cursor = root.walk();
        let found = root
            .named_children(&mut cursor)
            .filter_map(|n| function_of(n))
            .filter(|f| f.child_by_field_name("name").is_some_and(|n| self.text_of(n) == name))
            .last();
        found
    }

    /// By name, the places inside `within` (a byte range) where an identifier is a name of its
    /// scope: not an attribute (`x.name`), not a keyword argument's name (`f(name=1)`), not a
    /// module path in an import. One walk for every name.
    pub fn references(&self, within: Range<usize>) -> HashMap<String, Vec<Range<usize>>> {
        let mut out: HashMap<String, Vec<Range<usize>>> = HashMap::new();
        for v in self.visits() {
            let range = v.node.byte_range();
            if within.start <= range.start
                && range.end <= within.end
                && v.node.kind() == "identifier"
                && v.is_reference()
            {
                out.entry(self.text_of(v.node).to_owned()).or_default().push(range);
            }
        }
        out
    }

    /// The names a function binds for itself, in order of first appearance: its parameters and
    /// every name assigned, looped over, caught or bound by `with` or `:=` in its body (nested
    /// scopes included: renaming all of them together keeps every binding as it was). Names
    /// declared `global` or `nonlocal` are left out, and so are imports.
    pub fn locals(&self, function: Node<'_>) -> Vec<String> {
        let mut bound: Vec<Node<'_>> = Vec::new();
        let mut excluded = BTreeSet::new();
        for node in self.nodes(function) {
            match node.kind() {
                "parameters" | "lambda_parameters" => {
                    let mut cursor = node.walk();
                    bound.extend(node.named_children(&mut cursor).filter_map(parameter_name));
                }
                "assignment" | "augmented_assignment" | "for_statement" | "for_in_clause" => {
                    if let Some(left) = node.child_by_field_name("left") {
                        targets(left, &mut bound);
                    }
                }
                "named_expression" => bound.extend(node.child_by_field_name("name")),
                "as_pattern_target" => targets(node, &mut bound),
                "function_definition" if node != function => bound.extend(node.child_by_field_name("name")),
                "global_statement" | "nonlocal_statement" | "import_statement" | "import_from_statement" => {
                    excluded.extend(
                        self.nodes(node)
                            .into_iter()
                            .filter(|n| n.kind() == "identifier")
                            .map(|n| self.text_of(n).to_owned()),
                    );
                }
                _ => {}
            }
        }
        let mut out: Vec<String> = Vec::new();
        for node in bound {
            let name = self.text_of(node).to_owned();
            if !excluded.contains(&name) && !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }

    /// Names given as keyword arguments anywhere (`f(name=1)`).
    pub fn keyword_names(&self) -> BTreeSet<String> {
        self.nodes(self.root())
            .into_iter()
            .filter(|n| n.kind() == "keyword_argument")
            .filter_map(|n| n.child_by_field_name("name"))
            .map(|n| self.text_of(n).to_owned())
            .collect()
    }

    /// The string node of `function`'s docstring: its first statement, or the first after
    /// imports (HumanEval/115 imports before it).
    pub fn docstring<'t>(&self, function: Node<'t>) -> Option<Node<'t>> {
        let body = function.child_by_field_name("body")?;
        let mut cursor = body.walk();
        let first = body
            .named_children(&mut cursor)
            .find(|n| !matches!(n.kind(), "import_statement" | "import_from_statement" | "comment"))?;
        let string = (first.kind() == "expression_statement").then(|| first.named_child(0)).flatten()?;
        (string.kind() == "string" && first.named_child_count() == 1).then_some(string)
    }

    /// The literal text of a string node (its contents between quotes, without interpolations).
    pub fn string_contents(&self, string: Node<'_>) -> Vec<Range<usize>> {
        let mut cursor = string.walk();
        let contents: Vec<Range<usize>> = string
            .children(&mut cursor)
            .filter(|n| n.kind() == "string_content")
            .map(|n| n.byte_range())
            .collect();
        contents
    }

    /// Leaves (tokens) outside string literals, in order, as (range, kind, parent kind).
    pub fn code_tokens(&self) -> Vec<(Range<usize>, &str, &str)> {
        self.visits()
            .into_iter()
            .filter(|v| v.node.child_count() == 0 && !v.node.byte_range().is_empty())
            .filter(|v| v.node.kind() != "comment" && !v.in_string)
            .map(|v| (v.node.byte_range(), v.node.kind(), v.parent.map_or("", |p| p.kind())))
            .collect()
    }

    /// Byte ranges of the outermost string literals that span lines, in order, each with
    /// whether it is a docstring.
    pub fn long_strings(&self) -> Vec<(Range<usize>, bool)> {
        self.visits()
            .into_iter()
            .filter(|v| v.node.kind() == "string" && !v.in_string)
            .filter(|v| v.node.start_position().row != v.node.end_position().row)
            .map(|v| (v.node.byte_range(), v.is_docstring()))
            .collect()
    }

    /// Comment tokens' ranges.
    pub fn comments(&self) -> Vec<Range<usize>> {
        self.nodes(self.root())
            .into_iter()
            .filter(|n| n.kind() == "comment")
            .map(|n| n.byte_range())
            .collect()
    }

    /// Module-level statements' ranges, in order.
    pub fn top_statements(&self) -> Vec<(Range<usize>, bool)> {
        let root = self.root();
        let mut cursor = root.walk();
        let statements: Vec<(Range<usize>, bool)> = root
            .named_children(&mut cursor)
            .filter(|n| n.kind() != "comment")
            .map(|n| (n.byte_range(), function_of(n).is_some() || class_of(n)))
            .collect();
        statements
    }
}

/// The function a module-level statement defines, if it defines one.
fn function_of(node: Node<'_>) -> Option<Node<'_>> {
    match node.kind() {
        "function_definition" => Some(node),
        "decorated_definition" => {
            node.child_by_field_name("definition").filter(|d| d.kind() == "function_definition")
        }
        _ => None,
    }
}

fn class_of(node: Node<'_>) -> bool {
    node.kind() == "class_definition"
        || (node.kind() == "decorated_definition"
            && node.child_by_field_name("definition").is_some_and(|d| d.kind() == "class_definition"))
}

/// See [`Source::visits`].
#[derive(Clone, Copy)]
pub struct Visit<'t> {
    pub node: Node<'t>,
    parent: Option<Node<'t>>,
    grandparent: Option<Node<'t>>,
    /// The node's field in its parent (`name`, `attribute`...).
    field: Option<&'t str>,
    in_string: bool,
}

impl Visit<'_> {
    /// Whether an identifier here is a name of its scope: not an attribute (`x.name`), not a
    /// keyword argument's name (`f(name=1)`), not a module path in an import.
    fn is_reference(&self) -> bool {
        match self.parent.map(|p| p.kind()) {
            Some("attribute") => self.field != Some("attribute"),
            Some("keyword_argument") => self.field != Some("name"),
            Some("dotted_name" | "aliased_import" | "import_statement" | "import_from_statement") => false,
            _ => true,
        }
    }

    /// Whether a string here is a docstring: the first statement of a body or module.
    fn is_docstring(&self) -> bool {
        let (Some(statement), Some(block)) = (self.parent, self.grandparent) else { return false };
        statement.kind() == "expression_statement"
            && statement.named_child_count() == 1
            && matches!(block.kind(), "block" | "module")
            && block.named_child(0) == Some(statement)
    }
}

/// The name a parameter binds.
fn parameter_name(param: Node<'_>) -> Option<Node<'_>> {
    match param.kind() {
        "identifier" => Some(param),
        "default_parameter" | "typed_default_parameter" => param.child_by_field_name("name"),
        "typed_parameter" | "list_splat_pattern" | "dictionary_splat_pattern" => {
            let first = param.named_child(0)?;
            if first.kind() == "identifier" {
                Some(first)
            } else {
                parameter_name(first)
            }
        }
        _ => None,
    }
}

/// The names an assignment target binds (`a, (b, c)`: all three; `x[0]`, `x.y`: none). A loop,
/// not recursion: a row's code is only semi-trusted, and its nesting has no bound.
fn targets<'t>(target: Node<'t>, out: &mut Vec<Node<'t>>) {
    let mut todo = vec![target];
    let mut found = Vec::new();
    while let Some(node) = todo.pop() {
        match node.kind() {
            "identifier" => found.push(node),
            "pattern_list"
            | "tuple_pattern"
            | "list_pattern"
            | "tuple"
            | "list"
            | "parenthesized_expression"
            | "list_splat_pattern"
            | "list_splat"
            | "as_pattern_target"
            | "expression_list" => {
                let mut cursor = node.walk();
                todo.extend(node.named_children(&mut cursor));
            }
            _ => {}
        }
    }
    found.sort_by_key(|n| n.start_byte());
    out.extend(found);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locals_are_the_names_a_function_binds() {
        let src = Source::parse(
            "import math\nG = 1\ndef f(a, b: int, c=1, *args, d, **kw):\n    global G\n    x = [y for y in a if (z := y)]\n    u, (v, w) = 1, (2, 3)\n    a.b = 1\n    q[0] = 2\n    with open(a) as fh:\n        pass\n    for i in range(3): pass\n    return math.floor(x) + G\n",
        )
        .unwrap();
        let f = src.function("f").unwrap();
        assert_eq!(
            src.locals(f),
            ["a", "b", "c", "args", "d", "kw", "x", "y", "z", "u", "v", "w", "fh", "i"]
        );
        // `a.b`: b is an attribute there, but a parameter in the signature.
        let refs = src.references(f.byte_range());
        assert_eq!(refs["b"].len(), 1, "{refs:?}");
        assert!(Source::parse("def f(:\n").is_none());
    }

    /// A row's code is semi-trusted: nesting deep enough to overflow a recursive walk is read
    /// with loops.
    #[test]
    fn deep_nesting_is_walked_without_recursion() {
        let depth = 200_000;
        let text = format!("def f(a):\n    {}b{} = a\n    return b\n", "(".repeat(depth), ")".repeat(depth));
        let src = Source::parse(text).unwrap();
        let f = src.function("f").unwrap();
        assert_eq!(src.locals(f), ["a", "b"]);
        assert!(src.shape(true).len() > depth);
    }
}
