//! A tolerant reader for unified diffs and a strict writer for them.
//!
//! The reader accepts what models and hand edits produce: no `diff --git` header, wrong hunk
//! counts, CRLF line ends, prose or code fences around and between files, blank lines that
//! lost their leading space. The writer emits what libgit2 accepts: a `diff --git` header per
//! file and hunk counts recounted from the hunk bodies.

/// One line of a hunk body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// 1-based line of the first old line, as the header says (may be wrong).
    pub old_start: usize,
    pub new_start: usize,
    pub lines: Vec<HunkLine>,
    /// `\ No newline at end of file` after the old / new side's last line.
    pub old_no_newline: bool,
    pub new_no_newline: bool,
}

impl Hunk {
    pub fn old_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(s) | HunkLine::Remove(s) => Some(s.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect()
    }

    pub fn new_lines(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                HunkLine::Context(s) | HunkLine::Add(s) => Some(s.as_str()),
                HunkLine::Remove(_) => None,
            })
            .collect()
    }
}

/// One file's changes. A path of `None` is `/dev/null` (file created or deleted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FilePatch {
    pub old_path: Option<String>,
    pub new_path: Option<String>,
    pub hunks: Vec<Hunk>,
    /// `Binary files ... differ` or `GIT binary patch`: only libgit2 can apply it.
    pub binary: bool,
    /// `new file mode` / `deleted file mode` / `old mode` / `new mode` lines, as given.
    pub mode_lines: Vec<String>,
}

impl FilePatch {
    /// The path this patch leaves (or, for a deletion, removes).
    pub fn path(&self) -> &str {
        self.new_path.as_deref().or(self.old_path.as_deref()).unwrap_or("")
    }
}

fn strip_prefix_path(raw: &str) -> Option<String> {
    // `--- a/x.py\t2024-01-01 ...`: the timestamp after a tab is not part of the name.
    let raw = raw.split('\t').next().unwrap_or(raw).trim();
    let raw = raw.trim_matches('"');
    if raw == "/dev/null" {
        return None;
    }
    let stripped = raw.strip_prefix("a/").or_else(|| raw.strip_prefix("b/")).unwrap_or(raw);
    Some(stripped.to_owned())
}

fn parse_hunk_header(line: &str) -> Option<(usize, usize)> {
    // `@@ -12,5 +12,6 @@ optional section`
    let rest = line.strip_prefix("@@")?.trim_start();
    let mut parts = rest.split_whitespace();
    let old = parts.next()?.strip_prefix('-')?;
    let new = parts.next()?.strip_prefix('+')?;
    let start = |s: &str| s.split(',').next().and_then(|n| n.parse::<usize>().ok());
    Some((start(old)?, start(new)?))
}

fn is_hunk_body(line: &str) -> bool {
    line.starts_with([' ', '+', '-', '\\']) || line.is_empty()
}

/// Reads every file patch it can find in `text`; anything else is ignored.
pub fn parse(text: &str) -> Vec<FilePatch> {
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let mut files: Vec<FilePatch> = Vec::new();
    let mut current: Option<FilePatch> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("diff --git ") {
            if let Some(done) = current.take() {
                files.push(done);
            }
            let mut file = FilePatch::default();
            // `a/x b/x`: both halves are the same length for unrenamed files.
            if let Some((a, b)) = split_git_header(rest) {
                file.old_path = strip_prefix_path(&a);
                file.new_path = strip_prefix_path(&b);
            }
            current = Some(file);
            i += 1;
            continue;
        }
        if line.starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ ")) {
            let old = strip_prefix_path(&line[4..]);
            let new = strip_prefix_path(&lines[i + 1][4..]);
            let continues_header = current.as_ref().is_some_and(|f| f.hunks.is_empty() && !f.binary);
            if !continues_header {
                if let Some(done) = current.take() {
                    files.push(done);
                }
                current = Some(FilePatch::default());
            }
            let file = current.as_mut().expect("set above");
            file.old_path = old;
            file.new_path = new;
            i += 2;
            continue;
        }
        if let Some(file) = current.as_mut() {
            if line.starts_with("new file mode")
                || line.starts_with("deleted file mode")
                || line.starts_with("old mode")
                || line.starts_with("new mode")
            {
                if line.starts_with("new file mode") {
                    file.old_path = None;
                }
                if line.starts_with("deleted file mode") {
                    file.new_path = None;
                }
                file.mode_lines.push(line.to_owned());
                i += 1;
                continue;
            }
            if line.starts_with("Binary files") || line.starts_with("GIT binary patch") {
                file.binary = true;
                i += 1;
                continue;
            }
            if let Some((old_start, new_start)) = parse_hunk_header(line) {
                let mut hunk = Hunk {
                    old_start,
                    new_start,
                    lines: Vec::new(),
                    old_no_newline: false,
                    new_no_newline: false,
                };
                i += 1;
                while i < lines.len() && is_hunk_body(lines[i]) {
                    let body = lines[i];
                    let next_is_header =
                        body.starts_with("--- ") && lines.get(i + 1).is_some_and(|n| n.starts_with("+++ "));
                    if next_is_header {
                        break;
                    }
                    if body.is_empty() {
                        // A blank context line that lost its space, unless it is the gap
                        // after the last hunk line.
                        let more = lines[i + 1..].iter().take_while(|l| l.is_empty()).count();
                        let after = lines.get(i + 1 + more);
                        if after.is_some_and(|l| {
                            l.starts_with([' ', '+', '-']) && !l.starts_with("--- ") && !l.starts_with("+++ ")
                        }) {
                            hunk.lines.push(HunkLine::Context(String::new()));
                            i += 1;
                            continue;
                        }
                        break;
                    }
                    match body.as_bytes()[0] {
                        b' ' => hunk.lines.push(HunkLine::Context(body[1..].to_owned())),
                        b'+' => hunk.lines.push(HunkLine::Add(body[1..].to_owned())),
                        b'-' => hunk.lines.push(HunkLine::Remove(body[1..].to_owned())),
                        _ => {
                            // `\ No newline at end of file` marks the line just read.
                            match hunk.lines.last() {
                                Some(HunkLine::Remove(_)) => hunk.old_no_newline = true,
                                Some(HunkLine::Add(_)) => hunk.new_no_newline = true,
                                _ => {
                                    hunk.old_no_newline = true;
                                    hunk.new_no_newline = true;
                                }
                            }
                        }
                    }
                    i += 1;
                }
                file.hunks.push(hunk);
                continue;
            }
        }
        i += 1;
    }
    if let Some(done) = current.take() {
        files.push(done);
    }
    files.retain(|f| f.old_path.is_some() || f.new_path.is_some());
    files
}

fn split_git_header(rest: &str) -> Option<(String, String)> {
    let rest = rest.trim();
    if let Some(pos) = rest.find(" b/") {
        return Some((rest[..pos].to_owned(), rest[pos + 1..].to_owned()));
    }
    let mut parts = rest.splitn(2, ' ');
    Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
}

/// Paths a patch touches (new paths; old path for deletions), in order, without repeats.
pub fn files_touched(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for file in parse(text) {
        for path in [file.old_path.as_ref(), file.new_path.as_ref()].into_iter().flatten() {
            if !out.contains(path) {
                out.push(path.clone());
            }
        }
    }
    out
}

/// Writes file patches in the form libgit2 accepts, hunk counts recounted.
pub fn render(files: &[FilePatch]) -> String {
    let mut out = String::new();
    for file in files {
        if file.binary {
            continue;
        }
        let a = file.old_path.as_deref().or(file.new_path.as_deref()).unwrap_or("");
        let b = file.new_path.as_deref().or(file.old_path.as_deref()).unwrap_or("");
        out.push_str(&format!("diff --git a/{a} b/{b}\n"));
        if file.old_path.is_none() {
            out.push_str("new file mode 100644\n");
        } else if file.new_path.is_none() {
            out.push_str("deleted file mode 100644\n");
        } else {
            for mode in &file.mode_lines {
                out.push_str(mode);
                out.push('\n');
            }
        }
        match &file.old_path {
            Some(p) => out.push_str(&format!("--- a/{p}\n")),
            None => out.push_str("--- /dev/null\n"),
        }
        match &file.new_path {
            Some(p) => out.push_str(&format!("+++ b/{p}\n")),
            None => out.push_str("+++ /dev/null\n"),
        }
        for hunk in &file.hunks {
            let old_count = hunk.old_lines().len();
            let new_count = hunk.new_lines().len();
            // An empty side starts at the line before it (0 for an empty file).
            let old_start =
                if old_count == 0 { hunk.old_start.saturating_sub(1) } else { hunk.old_start.max(1) };
            let new_start =
                if new_count == 0 { hunk.new_start.saturating_sub(1) } else { hunk.new_start.max(1) };
            let old_start = if file.old_path.is_none() { 0 } else { old_start };
            let new_start = if file.new_path.is_none() { 0 } else { new_start };
            out.push_str(&format!("@@ -{old_start},{old_count} +{new_start},{new_count} @@\n"));
            let last_old = hunk.lines.iter().rposition(|l| !matches!(l, HunkLine::Add(_)));
            let last_new = hunk.lines.iter().rposition(|l| !matches!(l, HunkLine::Remove(_)));
            for (index, line) in hunk.lines.iter().enumerate() {
                let (mark, text) = match line {
                    HunkLine::Context(s) => (' ', s),
                    HunkLine::Remove(s) => ('-', s),
                    HunkLine::Add(s) => ('+', s),
                };
                out.push(mark);
                out.push_str(text);
                out.push('\n');
                let ends_old = Some(index) == last_old && hunk.old_no_newline;
                let ends_new = Some(index) == last_new && hunk.new_no_newline;
                if ends_old || ends_new {
                    out.push_str("\\ No newline at end of file\n");
                }
            }
        }
    }
    out
}

/// Re-renders a patch: headers added, junk and CRs dropped, hunk counts recounted.
pub fn normalize(text: &str) -> String {
    render(&parse(text))
}
