//! The model's Markdown as Telegram HTML (`parse_mode = "HTML"`).
//!
//! HTML rather than MarkdownV2: MarkdownV2 makes every `.`, `-`, `(`… outside an entity an error
//! unless escaped, so any slip rejects the whole message; in HTML only `&`, `<` and `>` need
//! escaping. Telegram knows `b i s u code pre a blockquote` and nothing else, so headings become
//! bold lines, list items get `•` or their number, rules a line of dashes, and raw HTML in the
//! model's text is shown as text. If Telegram still rejects the entities, the sender resends the
//! Markdown as plain text.

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// `markdown` as Telegram HTML.
pub fn to_html(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len() + markdown.len() / 8);
    // Numbering of the open lists (`None`: bullets).
    let mut lists: Vec<Option<u64>> = Vec::new();
    let options = Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(markdown, options) {
        match event {
            Event::Start(tag) => open(&mut out, tag, &mut lists),
            Event::End(tag) => close(&mut out, tag, &mut lists),
            Event::Text(text) => escape_into(&mut out, &text),
            Event::Code(code) => {
                out.push_str("<code>");
                escape_into(&mut out, &code);
                out.push_str("</code>");
            }
            Event::InlineMath(math) | Event::DisplayMath(math) => {
                out.push_str("<code>");
                escape_into(&mut out, &math);
                out.push_str("</code>");
            }
            Event::Html(html) | Event::InlineHtml(html) => escape_into(&mut out, &html),
            Event::SoftBreak | Event::HardBreak => out.push('\n'),
            Event::Rule => out.push_str("——————\n\n"),
            Event::TaskListMarker(done) => out.push_str(if done { "☑ " } else { "☐ " }),
            Event::FootnoteReference(name) => {
                out.push('[');
                escape_into(&mut out, &name);
                out.push(']');
            }
        }
    }
    out.trim_end().to_owned()
}

fn open(out: &mut String, tag: Tag<'_>, lists: &mut Vec<Option<u64>>) {
    match tag {
        Tag::Heading { .. } | Tag::Strong => out.push_str("<b>"),
        Tag::Emphasis => out.push_str("<i>"),
        Tag::Strikethrough => out.push_str("<s>"),
        Tag::BlockQuote(_) => out.push_str("<blockquote>"),
        Tag::CodeBlock(CodeBlockKind::Fenced(lang)) => {
            let lang = lang.split_whitespace().next().unwrap_or("");
            if lang.is_empty() {
                out.push_str("<pre>");
            } else {
                out.push_str("<pre><code class=\"language-");
                escape_into(out, lang);
                out.push_str("\">");
            }
        }
        Tag::CodeBlock(CodeBlockKind::Indented) => out.push_str("<pre>"),
        Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
            out.push_str("<a href=\"");
            escape_into(out, &dest_url);
            out.push_str("\">");
        }
        Tag::List(start) => {
            if !lists.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            lists.push(start);
        }
        Tag::Item => {
            let depth = lists.len().saturating_sub(1);
            out.push_str(&"  ".repeat(depth));
            match lists.last_mut() {
                Some(Some(n)) => {
                    out.push_str(&format!("{n}. "));
                    *n += 1;
                }
                _ => out.push_str("• "),
            }
        }
        _ => {}
    }
}

fn close(out: &mut String, tag: TagEnd, lists: &mut Vec<Option<u64>>) {
    match tag {
        TagEnd::Paragraph => out.push_str(if lists.is_empty() { "\n\n" } else { "\n" }),
        TagEnd::Heading(_) => out.push_str("</b>\n\n"),
        TagEnd::Strong => out.push_str("</b>"),
        TagEnd::Emphasis => out.push_str("</i>"),
        TagEnd::Strikethrough => out.push_str("</s>"),
        TagEnd::BlockQuote(_) => {
            trim_trailing_newlines(out);
            out.push_str("</blockquote>\n\n");
        }
        TagEnd::CodeBlock => {
            trim_trailing_newlines(out);
            let fenced_with_lang = out
                .rfind("<pre")
                .is_some_and(|at| out[at..].starts_with("<pre><code"));
            out.push_str(if fenced_with_lang {
                "</code></pre>\n\n"
            } else {
                "</pre>\n\n"
            });
        }
        TagEnd::Link | TagEnd::Image => out.push_str("</a>"),
        TagEnd::Item if !out.ends_with('\n') => out.push('\n'),
        TagEnd::List(_) => {
            lists.pop();
            if lists.is_empty() {
                out.push('\n');
            }
        }
        _ => {}
    }
}

fn trim_trailing_newlines(out: &mut String) {
    while out.ends_with('\n') {
        out.pop();
    }
}

/// Appends `text` with Telegram's three HTML specials (and `"` for attributes) escaped.
fn escape_into(out: &mut String, text: &str) {
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(ch),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn inline_styles_and_escaping() {
        assert_eq!(
            to_html("**bold** and *it* and ~~gone~~ and `a<b && c`"),
            "<b>bold</b> and <i>it</i> and <s>gone</s> and <code>a&lt;b &amp;&amp; c</code>"
        );
        assert_eq!(to_html("1 < 2 & 3 > 2"), "1 &lt; 2 &amp; 3 &gt; 2");
        assert_eq!(
            to_html("<script>x</script>"),
            "&lt;script&gt;x&lt;/script&gt;"
        );
    }

    #[test]
    fn code_blocks_keep_their_language_and_text() {
        assert_eq!(
            to_html("```rust\nfn main() { let a = 1 < 2; }\n```"),
            "<pre><code class=\"language-rust\">fn main() { let a = 1 &lt; 2; }</code></pre>"
        );
        assert_eq!(to_html("```\nplain\n```"), "<pre>plain</pre>");
    }

    #[test]
    fn headings_lists_links_and_quotes() {
        let html = to_html(
            "# Title\n\nSee [the docs](https://example.com/?a=1&b=\"2\").\n\n- one\n- two\n\n1. first\n2. second\n\n> quoted",
        );
        assert_eq!(
            html,
            "<b>Title</b>\n\nSee <a href=\"https://example.com/?a=1&amp;b=&quot;2&quot;\">the docs</a>.\n\n\
             • one\n• two\n\n1. first\n2. second\n\n<blockquote>quoted</blockquote>"
        );
    }

    #[test]
    fn every_tag_opened_is_closed() {
        let html = to_html(
            "# H\n\n**b *bi* b** [l](u) `c`\n\n```py\nx\n```\n\n> q **b**\n\n- a\n  - nested\n- [x] done",
        );
        for tag in ["b", "i", "a", "code", "pre", "blockquote"] {
            let opened = html.matches(&format!("<{tag}>")).count()
                + html.matches(&format!("<{tag} ")).count();
            let closed = html.matches(&format!("</{tag}>")).count();
            assert_eq!(opened, closed, "<{tag}> in {html}");
        }
        assert!(html.contains("☑ done"), "{html}");
    }
}
