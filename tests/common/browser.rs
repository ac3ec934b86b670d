//! Headless Chromium on pages the crate wrote, with the network cut off.

use std::path::Path;
use std::process::Command;

use regex::Regex;

/// Headless Chromium on `page` (with `#fragment` when not empty), the network cut off: every
/// connection goes to a closed port and no name resolves. `mode` is `--dump-dom` or
/// `--screenshot=PATH`. Returns stdout and the browser's log (console messages included).
pub fn chromium(page: &Path, fragment: &str, mode: &str) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}{}", page.canonicalize().unwrap().display(), fragment);
    let out = Command::new("timeout")
        .args(["120", "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND"])
        .args(["--enable-logging=stderr", "--v=0", "--window-size=1280,2000", mode, &url])
        .output()
        .expect("chromium (Debian's `chromium`; scripts/setup installs it)");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "chromium failed: {log}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), log)
}

/// Loads `page` and checks that our script ran cleanly and nothing was blocked by the page's
/// policy (blocked script would mean hostile markup got in, or our own hash is wrong).
pub fn load(page: &Path, fragment: &str) -> String {
    let (dom, log) = chromium(page, fragment, "--dump-dom");
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    assert!(dom.contains("<html"), "{dom}");
    dom
}

/// The page makes no request: no `<link>`, no external script, no absolute URL in a src or
/// href, and one script element (ours).
pub fn assert_self_contained(html: &str) {
    assert!(!html.contains("<link"), "no <link>");
    assert!(!html.contains("<script src"), "no external script");
    assert_eq!(html.matches("<script").count(), 1, "only our own script element");
    let attr = Regex::new(r#"(?i)\b(src|href)\s*=\s*["']?([^"'\s>]*)"#).unwrap();
    for found in attr.captures_iter(html) {
        let url = found[2].to_lowercase();
        assert!(
            !url.starts_with("http:") && !url.starts_with("https:") && !url.starts_with("//"),
            "{} = {url}",
            &found[1]
        );
    }
}

/// The text of the element with `id`.
pub fn text_of(dom: &str, id: &str) -> String {
    let re = Regex::new(&format!(r#"id="{}"[^>]*>(.*?)</"#, regex::escape(id))).unwrap();
    let inner = re.captures(dom).unwrap_or_else(|| panic!("no element #{id}"))[1].to_owned();
    Regex::new("<[^>]*>").unwrap().replace_all(&inner, "").into_owned()
}
