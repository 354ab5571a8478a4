//! Splitting a long reply into messages a platform accepts (Telegram: 4,096 UTF-16 units,
//! Discord: 2,000 characters), platform-neutral: the platform passes its limit and how it
//! counts.
//!
//! Where a split falls matters to the reader: at a paragraph if one is in the second half of
//! the message, else at a line, else at a space, and only inside a word that is longer than a
//! whole message. A split inside a fenced code block closes the fence at the end of one part and
//! reopens it, with its language, at the start of the next, so every part renders as code. A
//! split never falls inside an inline entity (bold, italic, strikethrough, a link, a code
//! span, as the Markdown parser sees them) unless the entity is longer than a whole message:
//! each part is formatted on its own, and a cut entity would show as stray `**` or a broken
//! link. Each part of a split reply ends with an `(i/n)` marker. Every part, markers and
//! fences included, fits the limit.

use std::ops::Range;

/// How a platform counts a message's length.
pub type Measure = fn(&str) -> usize;

/// Telegram counts UTF-16 code units.
pub fn utf16_units(text: &str) -> usize {
    text.encode_utf16().count()
}

/// Discord counts characters.
pub fn chars(text: &str) -> usize {
    text.chars().count()
}

/// Room kept in every part for its `\n(i/n)` marker.
const MARKER_ROOM: &str = "\n(9999/9999)";

/// A piece of the text that is never cut further: a line with its newline, or, for a line too
/// long for a part, a run of it.
#[derive(Debug)]
struct Segment<'a> {
    text: &'a str,
    /// The language of the code block this segment is inside (`Some("")` for a fence without
    /// one), as it stands before the segment.
    fence_before: Option<&'a str>,
    fence_after: Option<&'a str>,
    /// The segment is an empty line: a paragraph ends before it.
    blank: bool,
    /// Whether a split right after this segment would cut an inline entity.
    inside_entity: bool,
}

/// Splits `text` into parts of at most `max` as counted by `measure`. A text that fits is one
/// part, unchanged.
pub fn split(text: &str, max: usize, measure: Measure) -> Vec<String> {
    if measure(text) <= max {
        return vec![text.to_owned()];
    }
    let segments = segments(text, max, measure);
    let mut parts = Vec::new();
    let mut start = 0;
    while start < segments.len() {
        let end = part_end(&segments, start, max, measure);
        let part = render(&segments[start..end]);
        if !part.trim().is_empty() {
            parts.push(part);
        }
        start = end;
    }
    let n = parts.len();
    if n > 1 {
        for (i, part) in parts.iter_mut().enumerate() {
            part.push_str(&format!("\n({}/{n})", i + 1));
        }
    }
    parts
}

/// Where the part starting at `start` ends (exclusive): as many segments as fit, pulled back
/// to a paragraph break when there is one in the second half.
fn part_end(segments: &[Segment<'_>], start: usize, max: usize, measure: Measure) -> usize {
    let mut end = start + 1;
    while end < segments.len() && size(&segments[start..=end], measure) <= max {
        end += 1;
    }
    if end == segments.len() {
        return end;
    }
    let half = max / 2;
    let chosen = (start + 1..end)
        .rev()
        .find(|&at| segments[at].blank && size(&segments[start..at], measure) >= half)
        .unwrap_or(end);
    if !segments[chosen - 1].inside_entity {
        return chosen;
    }
    (start + 1..chosen)
        .rev()
        .find(|&at| !segments[at - 1].inside_entity)
        .unwrap_or(chosen)
}

/// Byte ranges of the inline entities in `text` that a split must not fall inside.
fn entity_spans(text: &str) -> Vec<Range<usize>> {
    use pulldown_cmark::{Event, Options, Parser, Tag};
    Parser::new_ext(text, Options::ENABLE_STRIKETHROUGH)
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(
                Tag::Emphasis
                | Tag::Strong
                | Tag::Strikethrough
                | Tag::Link { .. }
                | Tag::Image { .. },
            )
            | Event::Code(_) => Some(range),
            _ => None,
        })
        .collect()
}

/// Whether a split at byte `at` would cut one of `spans`.
fn cuts(spans: &[Range<usize>], at: usize) -> bool {
    spans.iter().any(|span| span.start < at && at < span.end)
}

/// The measured size of a part made of `segments`, with its fences and marker room.
fn size(segments: &[Segment<'_>], measure: Measure) -> usize {
    measure(&render(segments)) + measure(MARKER_ROOM)
}

/// A part's text: the fence reopened if it starts inside a code block, its segments, the fence
/// closed if it ends inside one.
fn render(segments: &[Segment<'_>]) -> String {
    let mut out = String::new();
    let (Some(first), Some(last)) = (segments.first(), segments.last()) else {
        return out;
    };
    if let Some(lang) = first.fence_before {
        out.push_str("```");
        out.push_str(lang);
        out.push('\n');
    }
    for segment in segments {
        out.push_str(segment.text);
    }
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    if last.fence_after.is_some() {
        out.push_str("\n```");
    }
    out
}

/// The text cut into lines, and lines longer than a part into runs (at spaces when it can).
fn segments(text: &str, max: usize, measure: Measure) -> Vec<Segment<'_>> {
    // Room a run must leave for a reopened and a closed fence with a long language name.
    let budget = max
        .saturating_sub(measure(MARKER_ROOM) + measure("```a-long-language\n\n```"))
        .max(1);
    let spans = entity_spans(text);
    let mut segments = Vec::new();
    let mut fence: Option<&str> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let line_start = offset;
        offset += line.len();
        let before = fence;
        if let Some(info) = fence_line(line) {
            fence = match fence {
                Some(_) => None,
                None => Some(info),
            };
        }
        if measure(line) <= budget {
            segments.push(Segment {
                text: line,
                fence_before: before,
                fence_after: fence,
                blank: line.trim().is_empty() && before.is_none(),
                inside_entity: cuts(&spans, offset),
            });
            continue;
        }
        let mut run_end = line_start;
        for run in runs(line, budget, measure, |at| cuts(&spans, line_start + at)) {
            run_end += run.len();
            segments.push(Segment {
                text: run,
                fence_before: fence,
                fence_after: fence,
                blank: false,
                inside_entity: cuts(&spans, run_end),
            });
        }
    }
    segments
}

/// The info string (language) of a fence line: three backticks, up to three spaces of indent.
fn fence_line(line: &str) -> Option<&str> {
    let trimmed = line.trim_end();
    let indent = trimmed.len() - trimmed.trim_start().len();
    let rest = trimmed.trim_start().strip_prefix("```")?;
    (indent <= 3 && !rest.contains('`')).then(|| rest.trim())
}

/// A too-long line in runs of at most `budget`: each ends after a space (one that `cuts` no
/// entity if it can) when one is in the run's second half, else at the last character that
/// fits.
fn runs(line: &str, budget: usize, measure: Measure, cuts: impl Fn(usize) -> bool) -> Vec<&str> {
    let mut runs = Vec::new();
    let mut rest = line;
    let mut done = 0;
    while !rest.is_empty() {
        if measure(rest) <= budget {
            runs.push(rest);
            break;
        }
        let mut cut = 0;
        let mut last_space = None;
        let mut last_clean_space = None;
        for (at, ch) in rest.char_indices() {
            let next = at + ch.len_utf8();
            if measure(&rest[..next]) > budget {
                break;
            }
            cut = next;
            if ch == ' ' {
                last_space = Some(next);
                if !cuts(done + next) {
                    last_clean_space = Some(next);
                }
            }
        }
        if cut == 0 {
            // Not even one character fits; take it anyway rather than loop.
            cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let in_second_half = |s: &usize| s * 2 >= cut;
        let at = last_clean_space
            .filter(in_second_half)
            .or(last_clean_space)
            .or(last_space.filter(in_second_half))
            .unwrap_or(cut);
        runs.push(&rest[..at]);
        rest = &rest[at..];
        done += at;
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every part fits; fences balance in every part; the parts hold the whole text.
    fn check(text: &str, max: usize, measure: Measure) -> Vec<String> {
        let parts = split(text, max, measure);
        for part in &parts {
            assert!(
                measure(part) <= max,
                "part of {} > {max}: {part:?}",
                measure(part)
            );
            let fences = part.lines().filter(|l| fence_line(l).is_some()).count();
            assert_eq!(fences % 2, 0, "unbalanced fences in {part:?}");
        }
        // Whitespace and fence lines aside (parts add fences), the parts hold the text.
        let squash = |s: &str| {
            s.lines()
                .filter(|l| fence_line(l).is_none())
                .flat_map(str::split_whitespace)
                .collect::<String>()
        };
        let mut joined = String::new();
        for (i, part) in parts.iter().enumerate() {
            let body = if parts.len() > 1 {
                let marker = format!("\n({}/{})", i + 1, parts.len());
                part.strip_suffix(&marker)
                    .expect("marker at the end")
                    .to_owned()
            } else {
                part.clone()
            };
            joined.push_str(&body);
            joined.push('\n');
        }
        assert_eq!(squash(&joined), squash(text));
        parts
    }

    #[test]
    fn short_text_is_one_part_unchanged() {
        assert_eq!(
            split("hello\n\nworld", 4096, utf16_units),
            ["hello\n\nworld"]
        );
    }

    #[test]
    fn splits_at_paragraphs_with_markers() {
        let para = "word ".repeat(300);
        let text = format!("{para}\n\n{para}\n\n{para}");
        let parts = check(&text, 4096, utf16_units);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].ends_with("(1/2)") && parts[1].ends_with("(2/2)"));
        assert!(parts[0].trim_end_matches("\n(1/2)").ends_with("word"));
    }

    #[test]
    fn a_code_block_split_is_closed_and_reopened_with_its_language() {
        let code: String = (0..400).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n\n```rust\n{code}```\n\nDone.");
        let parts = check(&text, 2000, chars);
        assert!(parts.len() >= 3, "{} parts", parts.len());
        for part in &parts[1..parts.len() - 1] {
            assert!(part.starts_with("```rust\n"), "{part:?}");
        }
        assert!(
            parts[0].contains("\n```\n(1/"),
            "the first part closes its fence"
        );
    }

    #[test]
    fn long_lines_break_at_spaces_and_long_words_anywhere() {
        let text = format!("{} {}", "a".repeat(50), "b ".repeat(100));
        let parts = check(&text, 60, chars);
        assert!(parts.len() > 2);
        let word = "x".repeat(250);
        check(&word, 60, chars);
    }

    #[test]
    fn utf16_counts_emoji_as_two_and_never_cuts_a_character() {
        let text = "😀".repeat(3000); // 6,000 UTF-16 units, 3,000 characters
        assert_eq!(split(&text, 4096, chars).len(), 1);
        let parts = check(&text, 4096, utf16_units);
        assert_eq!(parts.len(), 2);
    }

    #[test]
    fn splits_fall_outside_bold_links_and_code_spans() {
        // Lines of prose, each with a bold span that crosses into the next line, so the best
        // line break for size is often inside one.
        let mut text = String::new();
        for i in 0..40 {
            text.push_str(&format!(
                "Item {i} says **this part is bold\nand so is this** then [a link](https://example.com/{i}) and `code {i}`.\n"
            ));
        }
        for max in [300, 450, 700] {
            for part in check(&text, max, chars) {
                assert_eq!(part.matches("**").count() % 2, 0, "cut bold: {part:?}");
                assert_eq!(part.matches('`').count() % 2, 0, "cut code: {part:?}");
                assert_eq!(part.matches("](").count(), part.matches("[a link").count());
            }
        }
        // One long line: runs break at spaces outside the entities.
        let line = "plain words and **several bold words in a row** ".repeat(20);
        for part in check(&line, 200, chars) {
            assert_eq!(part.matches("**").count() % 2, 0, "cut bold: {part:?}");
        }
    }

    #[test]
    fn ten_thousand_characters_with_code_blocks() {
        let mut text = String::new();
        for i in 0..16 {
            text.push_str(&format!("Paragraph {i}: {}\n\n", "some prose ".repeat(40)));
            text.push_str("```python\n");
            for j in 0..8 {
                text.push_str(&format!("print('line {j} of block {i}')\n"));
            }
            text.push_str("```\n\n");
        }
        assert!(text.chars().count() > 10_000);
        let parts = check(&text, 4096, utf16_units);
        assert!(parts.len() >= 3);
    }
}
