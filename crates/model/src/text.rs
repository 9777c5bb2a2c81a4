//! Text from the wire as people see it: characters that act instead of
//! showing (controls, which move a terminal's cursor or clear its screen)
//! or that reorder or hide what surrounds them (bidirectional formatting,
//! zero-width characters) are written as `\u{...}` escapes, so
//! `alice\u{202e}moc.knab` cannot read as a bank's name. The console's
//! pages apply the same set (`assets/app.js`, `visible`).

use std::borrow::Cow;

/// True for a character shown as an escape: Unicode controls, the
/// bidirectional and zero-width formatting characters, and the characters
/// that show as nothing (soft hyphen, fillers, variation selectors, line
/// and paragraph separators, interlinear annotation marks, tags).
pub fn invisible(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{061c}'
                | '\u{115f}'..='\u{1160}'
                | '\u{17b4}'..='\u{17b5}'
                | '\u{180b}'..='\u{180f}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{fe00}'..='\u{fe0f}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0000}'..='\u{e0fff}'
        )
}

/// `s` with every [`invisible`] character written as its `\u{...}` escape
/// (borrowed when there is none).
pub fn visible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(invisible) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if invisible(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_direction_overrides_are_shown() {
        for (text, shown) in [
            ("alice", "alice"),
            ("ali\u{202e}ce", "ali\\u{202e}ce"),
            ("\u{1b}[2J\r", "\\u{1b}[2J\\u{d}"),
            ("a\u{200b}b\u{2066}", "a\\u{200b}b\\u{2066}"),
            ("é—", "é—"),
            ("a\u{ad}\u{e0041}b\u{3164}", "a\\u{ad}\\u{e0041}b\\u{3164}"),
        ] {
            assert_eq!(visible(text), shown, "{text:?}");
        }
    }
}
