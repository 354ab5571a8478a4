//! Session ids and titles.
//!
//! A session id is `YYYYMMDD_HHMMSS_<6 hex>` in UTC: sortable by start time, readable in logs,
//! random enough that two processes starting sessions in the same second almost never collide
//! (the stores retry on the rare collision). A continuation of a titled session is numbered:
//! `Refactor auth`, `Refactor auth (2)`, `Refactor auth (3)`.

use chrono::{DateTime, Utc};

/// A fresh session id for a session starting at `now`.
pub fn new_session_id(now: DateTime<Utc>) -> String {
    format!(
        "{}_{:06x}",
        now.format("%Y%m%d_%H%M%S"),
        fastrand::u32(..0x0100_0000)
    )
}

/// Splits `T (N)` into `(T, N)`; a title without a number is `(T, 1)`.
pub fn split_numbered_title(title: &str) -> (&str, u32) {
    if let Some(open) = title.rfind(" (")
        && let Some(inner) = title[open + 2..].strip_suffix(')')
        && !inner.is_empty()
        && inner.bytes().all(|b| b.is_ascii_digit())
        && let Ok(n) = inner.parse::<u32>()
        && n >= 2
    {
        return (&title[..open], n);
    }
    (title, 1)
}

/// The next title of a lineage given the titles already taken in it: `T (max+1)`.
pub fn next_numbered_title<'a>(base: &str, taken: impl IntoIterator<Item = &'a str>) -> String {
    let (base, _) = split_numbered_title(base);
    let highest = taken
        .into_iter()
        .filter_map(|t| {
            let (b, n) = split_numbered_title(t);
            (b == base).then_some(n)
        })
        .max()
        .unwrap_or(0);
    if highest == 0 {
        base.to_owned()
    } else {
        format!("{base} ({})", highest + 1)
    }
}

/// The `LIKE` pattern matching `base (…)` variants, with `%`, `_` and `\` escaped.
pub(crate) fn numbered_title_pattern(base: &str) -> String {
    format!("{} (%)", super::search_text::escape_like(base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn session_id_has_the_documented_shape() {
        let now = Utc.with_ymd_and_hms(2026, 11, 30, 9, 5, 7).single();
        let id = new_session_id(now.expect("valid date"));
        assert_eq!(&id[..16], "20261130_090507_");
        assert_eq!(id.len(), 22);
        assert!(id[16..].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn titles_number_from_two() {
        assert_eq!(
            next_numbered_title("Refactor auth", ["Refactor auth"]),
            "Refactor auth (2)"
        );
        assert_eq!(
            next_numbered_title("Refactor auth (2)", ["Refactor auth", "Refactor auth (2)"]),
            "Refactor auth (3)"
        );
        assert_eq!(next_numbered_title("Fresh", []), "Fresh");
        // Unrelated titles and odd suffixes do not count.
        assert_eq!(
            next_numbered_title("A", ["A", "A (x)", "AB (7)", "A (0)"]),
            "A (2)"
        );
    }

    #[test]
    fn split_keeps_non_numeric_parentheses() {
        assert_eq!(split_numbered_title("Plan (draft)"), ("Plan (draft)", 1));
        assert_eq!(split_numbered_title("Plan (12)"), ("Plan", 12));
        assert_eq!(split_numbered_title("Plan ()"), ("Plan ()", 1));
    }

    #[test]
    fn like_pattern_escapes_wildcards() {
        assert_eq!(numbered_title_pattern("50%_off\\"), "50\\%\\_off\\\\ (%)");
    }
}
