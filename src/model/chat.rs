//! Chat prompts: the model's own Jinja template (`tokenizer.chat_template`) rendered with
//! minijinja, with the Python string methods such templates call (pycompat).

use std::path::PathBuf;

use minijinja::{context, Environment, Error, ErrorKind};

use super::error::{ModelError, Result};
use super::ChatMessage;

/// A compiled chat template and the special tokens it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    path: PathBuf,
    bos_token: String,
    eos_token: String,
}

fn raise_exception(message: String) -> std::result::Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

impl ChatTemplate {
    pub fn new(
        source: &str,
        path: PathBuf,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<Self> {
        let mut env = Environment::new();
        // The same whitespace rules as the Jinja environment Hugging Face renders templates in.
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .expect("default delimiters are valid"),
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned("chat", source.to_string())
            .map_err(|source| ModelError::ChatTemplate { path: path.clone(), source })?;
        Ok(Self {
            env,
            path,
            bos_token: bos_token.unwrap_or_default().to_string(),
            eos_token: eos_token.unwrap_or_default().to_string(),
        })
    }

    /// The prompt text for `messages`, ending with the assistant's turn opened.
    pub fn render(&self, messages: &[ChatMessage]) -> Result<String> {
        let err = |source| ModelError::ChatTemplate { path: self.path.clone(), source };
        let template = self.env.get_template("chat").map_err(err)?;
        template
            .render(context! {
                messages => messages
                    .iter()
                    .map(|m| context! { role => m.role.clone(), content => m.content.clone() })
                    .collect::<Vec<_>>(),
                add_generation_prompt => true,
                bos_token => self.bos_token.clone(),
                eos_token => self.eos_token.clone(),
            })
            .map_err(err)
    }
}
