//! Prompt templates and field expressions (minijinja, strict about undefined variables so a
//! misspelt field is an error, not an empty string).

use std::collections::BTreeMap;
use std::ops::Range;

use minijinja::{Environment, UndefinedBehavior, Value};

use super::def::SuiteDef;

/// Letters offered to templates as `letters` (option labels A, B, C, ...).
pub const LETTERS: [&str; 26] = [
    "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S", "T", "U",
    "V", "W", "X", "Y", "Z",
];

/// Why a template or expression gave nothing for one data row.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("no template `{name}`")]
    NoTemplate { name: String },
    #[error("no expression `{name}`")]
    NoExpression { name: String },
    #[error("template `{name}`: {}", describe(source))]
    Render { name: String, source: minijinja::Error },
    #[error("expression `{name}` ({text}): {}", describe(source))]
    Eval { name: String, text: String, source: minijinja::Error },
    #[error("expression `{name}` ({text}) is undefined for this row")]
    Undefined { name: String, text: String },
}

/// The suite's compiled templates and checked expressions.
pub struct Templates {
    env: Environment<'static>,
    expressions: BTreeMap<&'static str, String>,
}

fn regex_replace(value: String, pattern: String, replacement: String) -> Result<String, minijinja::Error> {
    let re = regex::Regex::new(&pattern).map_err(|e| {
        minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, format!("bad regex: {e}"))
    })?;
    Ok(re.replace_all(&value, replacement.as_str()).into_owned())
}

fn new_env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_syntax(
        minijinja::syntax::SyntaxConfig::builder()
            .keep_trailing_newline(true)
            .build()
            .expect("default syntax with trailing newlines kept is valid"),
    );
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_filter("regex_replace", regex_replace);
    env.add_global("letters", Value::from(LETTERS.to_vec()));
    env
}

impl Templates {
    /// Compiles every template and expression of `def`; an error carries the field's span.
    pub fn compile(def: &SuiteDef) -> Result<Templates, (Range<usize>, String)> {
        let mut env = new_env();
        let mut add =
            |name: &'static str, src: Option<&toml::Spanned<String>>| -> Result<(), (Range<usize>, String)> {
                if let Some(src) = src {
                    env.add_template_owned(name, src.get_ref().clone())
                        .map_err(|e| (src.span(), format!("template `{name}`: {}", describe(&e))))?;
                }
                Ok(())
            };
        add("text", Some(&def.prompt.text))?;
        add("target", def.prompt.target.as_ref())?;
        add("description", def.prompt.description.as_ref())?;
        if let Some(c) = &def.choices {
            add("continuation", c.get_ref().continuation.as_ref())?;
        }
        if let Some(c) = &def.code {
            add("program", Some(&c.get_ref().program))?;
            add("canonical", c.get_ref().canonical.as_ref())?;
        }
        if let Some(a) = &def.answer {
            add("answer_target", Some(&a.get_ref().target))?;
        }
        let mut expressions = BTreeMap::new();
        let mut expr =
            |name: &'static str, src: Option<&toml::Spanned<String>>| -> Result<(), (Range<usize>, String)> {
                if let Some(src) = src {
                    env.compile_expression(src.get_ref())
                        .map_err(|e| (src.span(), format!("expression `{name}`: {}", describe(&e))))?;
                    expressions.insert(name, src.get_ref().clone());
                }
                Ok(())
            };
        expr("id", def.data.id.as_ref())?;
        if let Some(c) = &def.choices {
            let c = c.get_ref();
            expr("choices", Some(&c.list))?;
            expr("gold", Some(&c.gold))?;
            expr("labels", c.labels.as_ref())?;
        }
        Ok(Templates { env, expressions })
    }

    pub fn has(&self, name: &str) -> bool {
        self.env.get_template(name).is_ok()
    }

    /// Renders the named template.
    pub fn render(&self, name: &str, ctx: &Value) -> Result<String, TemplateError> {
        let template =
            self.env.get_template(name).map_err(|_| TemplateError::NoTemplate { name: name.to_owned() })?;
        template.render(ctx).map_err(|source| TemplateError::Render { name: name.to_owned(), source })
    }

    pub fn has_expression(&self, name: &str) -> bool {
        self.expressions.contains_key(name)
    }

    /// Evaluates the named expression.
    pub fn eval(&self, name: &str, ctx: &Value) -> Result<Value, TemplateError> {
        let text = self
            .expressions
            .get(name)
            .ok_or_else(|| TemplateError::NoExpression { name: name.to_owned() })?;
        let failed = |source| TemplateError::Eval { name: name.to_owned(), text: text.clone(), source };
        // Compiled (and checked) once at load; compiled again here because the compiled form
        // borrows the environment.
        let value = self.env.compile_expression(text).and_then(|expr| expr.eval(ctx)).map_err(failed)?;
        if value.is_undefined() {
            return Err(TemplateError::Undefined { name: name.to_owned(), text: text.clone() });
        }
        Ok(value)
    }
}

/// minijinja's message with its detail, on one line.
fn describe(err: &minijinja::Error) -> String {
    let mut s = err.to_string();
    if let Some(detail) = err.detail() {
        if !s.contains(detail) {
            s.push_str(": ");
            s.push_str(detail);
        }
    }
    s
}
