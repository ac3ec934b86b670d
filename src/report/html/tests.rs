use super::*;

#[test]
fn hostile_text_stays_text() {
    let payload = "</script><script>alert(1)</script><img src=x onerror=\"alert('x')\">\u{0}&";
    let m = text_tag("td", &[("data-id", payload)], payload);
    let html = m.as_str();
    assert!(!html.contains("<script") && !html.contains("<img"), "{html}");
    assert!(html.contains("&lt;/script&gt;&lt;script&gt;alert(1)"), "{html}");
    assert!(html.contains("onerror=&quot;alert(&#39;x&#39;)&quot;"), "{html}");
    assert!(!html.contains('\u{0}'), "control characters are dropped");
}

#[test]
fn links_stay_relative_and_inside_the_folder() {
    let link = relative_link(&["logs", "a b", "test_output.txt"], "output");
    assert_eq!(link.as_str(), "<a href=\"logs/a%20b/test_output.txt\">output</a>");
    let scheme = relative_link(&["javascript:alert(1)//x"], "x");
    assert!(scheme.as_str().contains("href=\"javascript%3Aalert%281%29%2F%2Fx\""), "{}", scheme.as_str());
    assert_eq!(relative_link(&["..", "secret"], "up").as_str(), "up", "no link climbs out");
}

#[test]
fn diff_lines_are_classed_by_hunk_counts() {
    let patch =
        "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a = 1\n--- b\n+++ c\n d\n";
    let html = diff(patch);
    let classes: Vec<&str> =
        html.as_str().split("<span class=\"").skip(1).map(|s| s.split('"').next().unwrap()).collect();
    // Inside the hunk, "--- b" is a removed line "-- b", not a file header.
    assert_eq!(classes, ["meta", "meta", "meta", "hunk", "ctx", "del", "add", "ctx"]);
    assert_eq!(hunk_counts("@@ -5 +5,0 @@ fn x"), Some((1, 0)));
    assert_eq!(hunk_counts("@@ nonsense"), None);
}

#[test]
fn the_policy_allows_exactly_our_script() {
    let html = page("t <1>", "s", Markup::text("body"));
    let expected = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(SCRIPT.as_bytes()));
    assert!(html.contains(&format!("script-src 'sha256-{expected}'")));
    assert!(html.contains("<title>t &lt;1&gt;</title>"));
}

#[test]
fn tables_carry_sort_keys_filters_and_details() {
    let table = Table {
        id: "items",
        columns: vec![Column { title: "id", numeric: false }, Column { title: "time", numeric: true }],
        rows: vec![
            Row { id: "a".into(), cells: vec![Cell::text("a"), Cell::number("2.0 s", 2.0)], detail: None },
            Row {
                id: "b".into(),
                cells: vec![Cell::text("b").class("v-resolved"), Cell::number("1.0 s", 1.0)],
                detail: Some(pre("<detail>")),
            },
        ],
        filter_column: Some(0),
    };
    let html = table.render();
    let html = html.as_str();
    assert!(html.contains("<td data-sort=\"2\">2.0 s</td>"), "{html}");
    assert!(html.contains("<tr class=\"item expandable\" data-id=\"b\"><td class=\"v-resolved\">b</td>"));
    assert!(html.contains("<tr class=\"detail\" hidden><td colspan=\"2\"><pre class=\"text\">&lt;detail&gt;"));
    assert!(html.contains("<option value=\"a\">a</option><option value=\"b\">b</option>"), "{html}");
    assert_eq!(clip("héllo", 2), ("h".into(), true), "cut at a character boundary");
}
