//! `Content-Disposition` for downloads: a file name may hold any character (a dataset named
//! `Café` exports as `Café.csv`), but a header value is ASCII. Browsers read the RFC 6266 /
//! RFC 5987 `filename*` (UTF-8, percent-encoded); older clients get an ASCII `filename`.

use axum::http::HeaderValue;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// What RFC 5987 leaves unencoded (`attr-char`), besides letters and digits.
const ATTR_CHAR: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'!')
    .remove(b'#')
    .remove(b'$')
    .remove(b'&')
    .remove(b'+')
    .remove(b'-')
    .remove(b'.')
    .remove(b'^')
    .remove(b'_')
    .remove(b'`')
    .remove(b'|')
    .remove(b'~');

/// `attachment; filename="Caf_.csv"; filename*=UTF-8''Caf%C3%A9.csv` (only the first part
/// for a name that is plain ASCII already).
pub fn attachment(name: &str) -> HeaderValue {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let value = if ascii == name {
        format!("attachment; filename=\"{ascii}\"")
    } else {
        format!(
            "attachment; filename=\"{ascii}\"; filename*=UTF-8''{}",
            utf8_percent_encode(name, ATTR_CHAR)
        )
    };
    HeaderValue::from_str(&value).expect("only ASCII graphic characters and spaces remain")
}

#[cfg(test)]
mod tests {
    use super::attachment;

    #[test]
    fn names_of_any_script_survive_and_quotes_cannot_break_out() {
        assert_eq!(
            attachment("people-errors.csv"),
            "attachment; filename=\"people-errors.csv\""
        );
        assert_eq!(
            attachment("Café \"x\".csv"),
            "attachment; filename=\"Caf_ _x_.csv\"; filename*=UTF-8''Caf%C3%A9%20%22x%22.csv"
        );
        assert_eq!(
            attachment("данные.xlsx").to_str().unwrap(),
            "attachment; filename=\"______.xlsx\"; \
             filename*=UTF-8''%D0%B4%D0%B0%D0%BD%D0%BD%D1%8B%D0%B5.xlsx"
        );
        assert_eq!(
            attachment("a\r\nSet-Cookie: x.csv").to_str().unwrap(),
            "attachment; filename=\"a__Set-Cookie: x.csv\"; \
             filename*=UTF-8''a%0D%0ASet-Cookie%3A%20x.csv"
        );
    }
}
