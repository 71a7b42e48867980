//! `[notify]` as the binary reads it: the book's example parses; a webhook URL that is not
//! https (nor loopback http) is refused with exit 2, naming the file, line and key, and never
//! echoing the URL's token.

use super::*;

#[test]
fn the_books_notify_table_parses_and_a_plain_http_webhook_is_refused_without_its_token() {
    let s = Scratch::new("notify-config");
    let config = s.file("book.toml", crate::cli::readme::block("notify-config"));
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .args(["sessions", "--json"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let bad = s.file(
        "bad.toml",
        format!("[notify]\ncommand = [\"true\"]\nwebhook = \"http://hooks.example.com/{TOKEN}\"\n"),
    );
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &bad)
        .args(["sessions", "--json"]));
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("bad.toml:3: key `notify.webhook`")
            && out.stderr.contains("plain http to hooks.example.com"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains(TOKEN), "{}", out.stderr);
}
