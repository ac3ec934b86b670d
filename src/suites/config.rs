//! Loading a suite file (`harness/suites/NAME.toml`): its declaration is read and checked, and
//! every template and expression compiled, so a typo is reported with the file and line before
//! any model work starts.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::def::{CodeDef, GenerationDef, SuiteDef, SuiteKind};
use super::extract::{AnswerMatch, Extractor};
use super::template::Templates;
use super::SuiteError;

/// A loaded, checked suite: its declaration, the file it came from, and compiled templates.
pub struct Suite {
    pub def: SuiteDef,
    pub path: PathBuf,
    pub text: String,
    pub templates: Templates,
    pub extractors: Vec<Extractor>,
    /// How extracted answers are compared with the reference (generate suites).
    pub answer_match: Option<AnswerMatch>,
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite").field("name", &self.def.name).field("path", &self.path).finish()
    }
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

impl Suite {
    /// Reads and checks a suite file.
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| SuiteError::Io { path: path.to_path_buf(), source })?;
        Self::parse(path, text)
    }

    pub fn parse(path: &Path, text: String) -> Result<Suite, SuiteError> {
        let def: SuiteDef = toml::from_str(&text).map_err(|err| {
            let (line, column) = err.span().map_or((0, 0), |s| line_col(&text, s.start));
            SuiteError::SuiteFile {
                path: path.to_path_buf(),
                line,
                column,
                message: err.message().to_string(),
            }
        })?;
        let at = |span: Range<usize>, message: String| {
            let (line, column) = line_col(&text, span.start);
            SuiteError::SuiteFile { path: path.to_path_buf(), line, column, message }
        };
        let kind = *def.kind.get_ref();
        let kind_span = def.kind.span();
        let need = |present: bool, section: &str| {
            if present {
                Ok(())
            } else {
                Err(at(kind_span.clone(), format!("a {kind:?} suite needs a [{section}] section")))
            }
        };
        let forbid = |span: Option<Range<usize>>, section: &str| match span {
            Some(span) => Err(at(span, format!("[{section}] does not apply to a {kind:?} suite"))),
            None => Ok(()),
        };
        match kind {
            SuiteKind::Code => {
                need(def.generation.is_some(), "generation")?;
                need(def.code.is_some(), "code")?;
                forbid(def.choices.as_ref().map(|c| c.span()), "choices")?;
                forbid(def.answer.as_ref().map(|c| c.span()), "answer")?;
            }
            SuiteKind::Generate => {
                need(def.generation.is_some(), "generation")?;
                need(def.answer.is_some(), "answer")?;
                forbid(def.choices.as_ref().map(|c| c.span()), "choices")?;
                forbid(def.code.as_ref().map(|c| c.span()), "code")?;
            }
            SuiteKind::MultipleChoice => {
                need(def.choices.is_some(), "choices")?;
                forbid(def.generation.as_ref().map(|c| c.span()), "generation")?;
                forbid(def.code.as_ref().map(|c| c.span()), "code")?;
                forbid(def.answer.as_ref().map(|c| c.span()), "answer")?;
            }
        }
        if let Some(hub) = &def.data.hub {
            if let Some(message) = hub.get_ref().problem() {
                return Err(at(hub.span(), message));
            }
        }
        if let Some(generation) = &def.generation {
            if generation.get_ref().n == 0 {
                return Err(at(generation.span(), "generation.n must be at least 1".into()));
            }
        }
        if let Some(code) = &def.code {
            let c = code.get_ref();
            if c.ks.is_empty() || c.ks.contains(&0) || c.timeout_s <= 0.0 {
                return Err(at(code.span(), "code needs ks >= 1 and timeout_s > 0".into()));
            }
        }
        if let Some(format) = &def.prompt.format {
            match &format.get_ref().label {
                Some(label) if !label.contains("{L}") => {
                    return Err(at(format.span(), "prompt.format.label must show the letter as {L}".into()))
                }
                None if kind == SuiteKind::MultipleChoice => {
                    return Err(at(
                        format.span(),
                        "prompt.format.label is needed where options are listed (\"{L}. \")".into(),
                    ))
                }
                _ => {}
            }
        }
        if let Some(perturb) = &def.perturb {
            let p = perturb.get_ref();
            if let Some(field) = p.text.iter().find(|f| !def.data.fields.contains(f)) {
                return Err(at(
                    perturb.span(),
                    format!("perturb.text names `{field}`, which is not among data.fields"),
                ));
            }
            if let Some(code) = &p.code {
                if let Some(field) = code.fields().find(|f| !def.data.fields.contains(f)) {
                    return Err(at(
                        perturb.span(),
                        format!("perturb.code names `{field}`, which is not among data.fields"),
                    ));
                }
                if kind != SuiteKind::Code || code.function.is_empty() {
                    return Err(at(
                        perturb.span(),
                        "perturb.code belongs to a code suite and names its function's fields (function = [...])"
                            .into(),
                    ));
                }
            }
        }
        if def.fewshot.k > 0 && kind != SuiteKind::MultipleChoice && def.prompt.target.is_none() {
            return Err(at(
                def.prompt.text.span(),
                "few-shot examples need prompt.target (the template of an example's answer)".into(),
            ));
        }

        let templates = Templates::compile(&def).map_err(|(span, message)| at(span, message))?;
        let mut extractors = Vec::new();
        let mut answer_match = None;
        if let Some(answer) = &def.answer {
            let a = answer.get_ref();
            for e in &a.extract {
                let ex = Extractor::new(e).map_err(|err| {
                    at(answer.span(), format!("extractor `{}`: {}", e.name, crate::error_chain(&err)))
                })?;
                extractors.push(ex);
            }
            answer_match =
                Some(AnswerMatch::new(a).map_err(|err| at(answer.span(), crate::error_chain(&err)))?);
        }
        Ok(Suite { def, path: path.to_path_buf(), text, templates, extractors, answer_match })
    }

    pub fn kind(&self) -> SuiteKind {
        *self.def.kind.get_ref()
    }

    pub fn generation(&self) -> Option<&GenerationDef> {
        self.def.generation.as_ref().map(|g| g.get_ref())
    }

    pub fn code(&self) -> Option<&CodeDef> {
        self.def.code.as_ref().map(|g| g.get_ref())
    }
}
