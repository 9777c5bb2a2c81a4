//! A second, independent reading of where RFC 3261 §25.1's `name-addr`
//! puts the URI, written as a character state machine rather than by
//! searching bytes, for the tests and the fuzz target to hold
//! [`crate::NameAddr`] to. Not for production use: it allocates.

/// (display name, URI) as the grammar reads `v` (with the tolerance
/// [`crate::NameAddr::parse`] documents: escapes outside quotes).
pub fn display_and_uri(v: &str) -> (Option<String>, String) {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        Text,
        TextEscape,
        Quoted,
        QuotedEscape,
        Angle,
    }
    let v = v.trim();
    let (mut state, mut display, mut uri) = (State::Text, String::new(), String::new());
    let (mut semicolon_seen, mut quote_before_params) = (false, false);
    for c in v.chars() {
        state = match (state, c) {
            (State::Angle, '>') => break,
            (State::Angle, c) => {
                uri.push(c);
                State::Angle
            }
            (State::Text, '<') => State::Angle,
            (State::Text | State::Quoted, '\\') => {
                display.push(c);
                if state == State::Text {
                    State::TextEscape
                } else {
                    State::QuotedEscape
                }
            }
            (State::Text | State::Quoted, '"') => {
                display.push(c);
                quote_before_params |= !semicolon_seen;
                if state == State::Text {
                    State::Quoted
                } else {
                    State::Text
                }
            }
            (State::Text, c) => {
                semicolon_seen |= c == ';';
                display.push(c);
                State::Text
            }
            (State::TextEscape, c) => {
                display.push(c);
                State::Text
            }
            (State::QuotedEscape | State::Quoted, c) => {
                display.push(c);
                State::Quoted
            }
        };
    }
    if state == State::Angle {
        return (crate::name_addr::display_text(&display).map(String::from), uri);
    }
    if quote_before_params {
        return (None, String::new());
    }
    (None, v.split(';').next().unwrap_or("").to_string())
}
