//! From what a user typed to search terms both backends accept, and snippets from hits.
//!
//! Users type anything: quotes, `-`, `:`, `*`, `AND`/`OR`/`NOT`, unbalanced parentheses,
//! emoji, CJK. None of it is passed to a query language. The text is split into plain terms —
//! runs of letters and digits (lower-cased), and runs of CJK characters kept apart because word
//! tokenisers cannot split them — and every term must match. The last word also matches as a
//! prefix, so a half-typed word still finds something. Because terms contain only letters and
//! digits, quoting them is enough to make them literal in FTS5 and `to_tsquery`.

/// The terms of a query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Terms {
    /// Lower-cased runs of letters and digits (no CJK), matched as words.
    pub words: Vec<String>,
    /// Runs of CJK characters, matched as substrings.
    pub cjk: Vec<String>,
}

impl Terms {
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.cjk.is_empty()
    }
}

/// Scripts written without spaces between words (Han, kana, Hangul…), as code point ranges.
const CJK_RANGES: &[(u32, u32)] = &[
    (0x1100, 0x11FF),   // Hangul Jamo
    (0x2E80, 0x2FDF),   // CJK radicals, Kangxi
    (0x3040, 0x30FF),   // Hiragana, Katakana
    (0x3100, 0x312F),   // Bopomofo
    (0x3130, 0x318F),   // Hangul compatibility Jamo
    (0x31F0, 0x31FF),   // Katakana extensions
    (0x3400, 0x4DBF),   // CJK extension A
    (0x4E00, 0x9FFF),   // CJK unified ideographs
    (0xA960, 0xA97F),   // Hangul Jamo extended A
    (0xAC00, 0xD7FF),   // Hangul syllables + Jamo extended B
    (0xF900, 0xFAFF),   // CJK compatibility ideographs
    (0xFF66, 0xFF9F),   // half-width Katakana
    (0x20000, 0x3FFFF), // CJK extensions B–H
];

/// True for characters of scripts written without spaces between words.
pub(crate) fn is_cjk(c: char) -> bool {
    let c = c as u32;
    CJK_RANGES.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

/// A regular-expression bracket expression matching any CJK character; PostgreSQL's
/// `iris_has_cjk` (migrations/postgres) must use exactly this, which a test checks.
#[cfg(test)]
fn cjk_char_class() -> String {
    let mut class = String::from("[");
    for &(lo, hi) in CJK_RANGES {
        for c in [lo, hi] {
            class.push(char::from_u32(c).unwrap_or(' '));
            if c == lo {
                class.push('-');
            }
        }
    }
    class.push(']');
    class
}

/// True when the text holds any CJK character (such rows also go to the trigram index).
pub(crate) fn contains_cjk(text: &str) -> bool {
    text.chars().any(is_cjk)
}

/// Splits user text into terms. Never fails; may return no terms (then nothing matches).
pub(crate) fn terms(text: &str) -> Terms {
    #[derive(PartialEq)]
    enum Run {
        None,
        Word,
        Cjk,
    }
    let mut terms = Terms::default();
    let mut current = String::new();
    let mut run = Run::None;
    let flush = |run: &Run, current: &mut String, terms: &mut Terms| {
        if current.is_empty() {
            return;
        }
        let term = std::mem::take(current);
        let list = if *run == Run::Cjk {
            &mut terms.cjk
        } else {
            &mut terms.words
        };
        if !list.contains(&term) {
            list.push(term);
        }
    };
    for c in text.chars() {
        let kind = if is_cjk(c) {
            Run::Cjk
        } else if c.is_alphanumeric() {
            Run::Word
        } else {
            Run::None
        };
        if kind != run {
            flush(&run, &mut current, &mut terms);
            run = kind;
        }
        match run {
            Run::Word => current.extend(c.to_lowercase()),
            Run::Cjk => current.push(c),
            Run::None => {}
        }
    }
    flush(&run, &mut current, &mut terms);
    // Keep queries bounded however much was pasted.
    terms.words.truncate(16);
    terms.cjk.truncate(8);
    terms
}

/// An FTS5 MATCH expression: every word quoted, all required, the last one as a prefix.
pub(crate) fn fts5_words(words: &[String]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push('"');
        out.push_str(w);
        out.push('"');
        if i + 1 == words.len() {
            out.push('*');
        }
    }
    out
}

/// A PostgreSQL `to_tsquery('simple', …)` text: every word quoted, `&`-joined, last as prefix.
pub(crate) fn pg_tsquery(words: &[String]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push_str(" & ");
        }
        out.push('\'');
        out.push_str(w);
        out.push('\'');
        if i + 1 == words.len() {
            out.push_str(":*");
        }
    }
    out
}

/// Escapes `%`, `_` and `\` so that text is literal in a `LIKE … ESCAPE '\'` pattern.
pub(crate) fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A `LIKE … ESCAPE '\'` pattern matching text that contains `term`.
pub(crate) fn like_contains(term: &str) -> String {
    format!("%{}%", escape_like(term))
}

const SNIPPET_BEFORE: usize = 30;
const SNIPPET_CHARS: usize = 120;

/// A short excerpt of `text` around the first matching term, with matches in `[brackets]`.
/// Both backends use this, so hits read the same whichever database answered.
#[cfg(test)]
fn snippet(text: &str, terms: &Terms) -> String {
    excerpt(text, terms).0
}

/// The snippet and whether any term matched.
fn excerpt(text: &str, terms: &Terms) -> (String, bool) {
    let chars: Vec<char> = text.chars().collect();
    let folded: Vec<char> = chars
        .iter()
        .map(|c| c.to_lowercase().next().unwrap_or(*c))
        .collect();
    let needles: Vec<Vec<char>> = terms
        .words
        .iter()
        .chain(terms.cjk.iter())
        .map(|t| t.chars().collect())
        .filter(|t: &Vec<char>| !t.is_empty())
        .collect();
    let match_at = |i: usize| -> Option<usize> {
        needles
            .iter()
            .filter(|n| folded[i..].starts_with(n))
            .map(Vec::len)
            .max()
    };
    let found = (0..folded.len()).find(|&i| match_at(i).is_some());
    let first = found.unwrap_or(0);
    let start = first.saturating_sub(SNIPPET_BEFORE);
    let end = (start + SNIPPET_CHARS).min(chars.len());
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    let mut i = start;
    while i < end {
        match match_at(i) {
            Some(len) => {
                let stop = (i + len).min(chars.len());
                out.push('[');
                out.extend(&chars[i..stop]);
                out.push(']');
                i = stop;
            }
            None => {
                let c = chars[i];
                out.push(if c == '\n' || c == '\r' { ' ' } else { c });
                i += 1;
            }
        }
    }
    if i < chars.len() {
        out.push('…');
    }
    (out, found.is_some())
}

/// The snippet of the first field (content, tool name, tool-call arguments) holding a match.
pub(crate) fn best_snippet(fields: &[Option<String>], terms: &Terms) -> String {
    let mut fallback = None;
    for field in fields.iter().flatten() {
        let (snippet, matched) = excerpt(field, terms);
        if matched {
            return snippet;
        }
        fallback.get_or_insert(snippet);
    }
    fallback.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        terms(text).words
    }

    #[test]
    fn query_syntax_becomes_plain_words() {
        assert_eq!(
            words("\"deploy\" -prod OR NOT (x:y*"),
            ["deploy", "prod", "or", "not", "x", "y"]
        );
        assert_eq!(words("))) ((( \" ' * : -- 🎉"), Vec::<String>::new());
        assert_eq!(words("Naïve CAFÉ"), ["naïve", "café"]);
    }

    #[test]
    fn cjk_runs_are_separate_terms() {
        let t = terms("用Rust写一个数据库 サーバー");
        assert_eq!(t.words, ["rust"]);
        assert_eq!(t.cjk, ["用", "写一个数据库", "サーバー"]);
        assert!(contains_cjk("hello 世界"));
        assert!(!contains_cjk("hello world ☃"));
        let class = cjk_char_class();
        assert!(
            class.starts_with("[\u{1100}-\u{11FF}") && class.ends_with("\u{3FFFF}]"),
            "{class}"
        );
        let migration = include_str!("../../../migrations/postgres/0001_initial.sql");
        assert!(
            migration.contains(&format!("~ '{class}'")),
            "iris_has_cjk drifted from CJK_RANGES"
        );
    }

    #[test]
    fn match_expressions_quote_every_term() {
        let w = vec!["and".to_owned(), "deploy".to_owned()];
        assert_eq!(fts5_words(&w), "\"and\" \"deploy\"*");
        assert_eq!(pg_tsquery(&w), "'and' & 'deploy':*");
        assert_eq!(like_contains("50%_a\\"), "%50\\%\\_a\\\\%");
    }

    #[test]
    fn snippets_bracket_matches_and_trim() {
        let t = terms("deploy");
        assert_eq!(
            snippet("We Deploy on Fridays", &t),
            "We [Deploy] on Fridays"
        );
        let long = format!("{}deploy{}", "a ".repeat(40), " b".repeat(100));
        let s = snippet(&long, &t);
        assert!(s.starts_with('…') && s.ends_with('…'), "{s}");
        assert!(s.contains("[deploy]"));
        assert_eq!(
            snippet("今天部署数据库", &terms("数据库")),
            "今天部署[数据库]"
        );
    }
}
