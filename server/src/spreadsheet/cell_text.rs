//! How a workbook cell's value is written as the text the CSV import reads: whole numbers
//! without a decimal point, dates as ISO dates (with a time only when there is one), elapsed
//! times as the number of days they are. One place, so that every workbook format agrees.

use std::fmt::Write;

use calamine::ExcelDateTime;
use chrono::Timelike;

/// Spreadsheets store every number as a float: 42 is written back as `42`, not `42.0`.
pub fn number(float: f64, out: &mut String) {
    if float.fract() == 0.0 && float.abs() < 1e15 {
        write!(out, "{}", float as i64)
    } else {
        write!(out, "{float}")
    }
    .expect("writing to a String cannot fail");
}

/// A date or date-time as `2024-01-15` or `2024-01-15 12:30:00`; a duration, or a date too far
/// out to have a calendar date, as its number.
pub fn date_time(when: ExcelDateTime, out: &mut String) {
    // Beyond this many days (or not a number at all) the conversion overflows, and no
    // calendar needs them.
    const MOST_DAYS: f64 = 1e8;
    let days = when.as_f64();
    if days.is_nan() || days.abs() >= MOST_DAYS {
        return number(days, out);
    }
    match when.as_datetime() {
        Some(at) if !when.is_duration() => {
            // `NaiveDate` displays as `%Y-%m-%d`; the time is written to the second.
            let time = at.time();
            if time == chrono::NaiveTime::MIN {
                write!(out, "{}", at.date())
            } else {
                let (h, m, s) = (time.hour(), time.minute(), time.second());
                write!(out, "{} {h:02}:{m:02}:{s:02}", at.date())
            }
            .expect("writing to a String cannot fail");
        }
        _ => number(when.as_f64(), out),
    }
}
