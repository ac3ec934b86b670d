//! Finds the Debian mirror to bootstrap the base image from: a setting, else the host's own
//! apt configuration (one-line `.list` files and deb822 `.sources` files). No mirror is ever
//! written in code.

use std::path::{Path, PathBuf};

/// One `deb` source: where it is and which suites it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptSource {
    pub uri: String,
    pub suites: Vec<String>,
    /// The file the entry came from, for messages.
    pub origin: PathBuf,
}

/// Parses one-line style (`deb [opts] URI SUITE COMPONENTS...`) sources.
pub fn parse_list(text: &str, origin: &Path) -> Vec<AptSource> {
    let mut sources = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let mut words = line.split_whitespace().peekable();
        if words.next() != Some("deb") {
            continue;
        }
        // Skip an options block like `[arch=amd64 signed-by=...]`, which may span words.
        if words.peek().is_some_and(|w| w.starts_with('[')) {
            for word in words.by_ref() {
                if word.ends_with(']') {
                    break;
                }
            }
        }
        let (Some(uri), Some(suite)) = (words.next(), words.next()) else { continue };
        sources.push(AptSource {
            uri: uri.to_string(),
            suites: vec![suite.to_string()],
            origin: origin.to_path_buf(),
        });
    }
    sources
}

/// Parses deb822 style (`Types: deb`, `URIs: ...`, `Suites: ...`, paragraphs separated by
/// blank lines) sources.
pub fn parse_sources(text: &str, origin: &Path) -> Vec<AptSource> {
    let mut sources = Vec::new();
    for paragraph in text.split("\n\n") {
        let mut types = Vec::new();
        let mut uris = Vec::new();
        let mut suites = Vec::new();
        let mut enabled = true;
        for line in paragraph.lines() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            let Some((key, value)) = line.split_once(':') else { continue };
            let values = value.split_whitespace().map(str::to_string);
            match key.trim().to_ascii_lowercase().as_str() {
                "types" => types.extend(values),
                "uris" => uris.extend(values),
                "suites" => suites.extend(values),
                "enabled" => enabled = !value.trim().eq_ignore_ascii_case("no"),
                _ => {}
            }
        }
        if !enabled || !types.iter().any(|t| t == "deb") {
            continue;
        }
        for uri in uris {
            sources.push(AptSource { uri, suites: suites.clone(), origin: origin.to_path_buf() });
        }
    }
    sources
}

/// Every `deb` source of the host, in apt's reading order.
pub fn host_sources(apt_dir: &Path) -> Vec<AptSource> {
    let mut sources = Vec::new();
    let main_list = apt_dir.join("sources.list");
    if let Ok(text) = std::fs::read_to_string(&main_list) {
        sources.extend(parse_list(&text, &main_list));
    }
    let mut parts: Vec<PathBuf> = std::fs::read_dir(apt_dir.join("sources.list.d"))
        .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    parts.sort();
    for path in parts {
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        match path.extension().and_then(|e| e.to_str()) {
            Some("list") => sources.extend(parse_list(&text, &path)),
            Some("sources") => sources.extend(parse_sources(&text, &path)),
            _ => {}
        }
    }
    sources
}

/// The mirror serving `suite` exactly (not `-security` or `-updates`), if the host has one.
pub fn mirror_for_suite(sources: &[AptSource], suite: &str) -> Option<String> {
    sources
        .iter()
        .find(|s| s.suites.iter().any(|x| x == suite) && s.uri.starts_with("http"))
        .map(|s| s.uri.clone())
}

/// The first mirror serving a Debian release itself (a plain codename, not `-updates` or
/// `-security`): every suite is on it.
pub fn debian_mirror(sources: &[AptSource]) -> Option<String> {
    sources
        .iter()
        .find(|s| s.uri.starts_with("http") && s.suites.iter().any(|x| !x.contains('-') && !x.contains('/')))
        .map(|s| s.uri.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_entries_with_options_and_comments() {
        let text = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://m.example/debian bookworm main\n\
                    deb-src http://src.example/debian bookworm main\n\
                    deb http://m.example/debian-security bookworm-security main # trailing\n";
        let got = parse_list(text, Path::new("x.list"));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].uri, "http://m.example/debian");
        assert_eq!(got[0].suites, ["bookworm"]);
        assert_eq!(got[1].suites, ["bookworm-security"]);
    }

    #[test]
    fn deb822_paragraphs_pick_the_exact_suite() {
        let text = "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n\n\
                    Types: deb deb-src\nURIs: http://m.example/debian\nSuites: bookworm bookworm-updates\n\
                    Components: main\n\nTypes: deb\nEnabled: no\nURIs: http://off.example\nSuites: bookworm\n";
        let got = parse_sources(text, Path::new("d.sources"));
        assert_eq!(got.len(), 2);
        assert_eq!(mirror_for_suite(&got, "bookworm").as_deref(), Some("http://m.example/debian"));
        assert_eq!(mirror_for_suite(&got, "trixie"), None);
        // Another suite comes from the mirror of a release, never from the security archive
        // listed first.
        assert_eq!(got[0].uri, "http://sec.example/debian-security");
        assert_eq!(debian_mirror(&got).as_deref(), Some("http://m.example/debian"));
    }
}
