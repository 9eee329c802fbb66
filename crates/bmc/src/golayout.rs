//! Go time layouts (`2006-01-02T15:04:05Z07:00`), as bmclib's RPC provider formats its
//! timestamp header with `time.Now().Format(timestampFormat)`. The layout is read the way Go's
//! `time` package reads it (the same elements, found the same way, everything else literal);
//! times are formatted in UTC, so zone elements print `UTC`, `Z` or `+00:00`.

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Go's RFC 3339 layout (`time.RFC3339`), bmclib's default.
pub const RFC3339: &str = "2006-01-02T15:04:05Z07:00";

/// Go's named layouts: a `timestampFormat` holding one of these names (not the layout) is
/// refused with the layout to write instead.
pub const NAMED: [(&str, &str); 19] = [
    ("Layout", "01/02 03:04:05PM '06 -0700"),
    ("ANSIC", "Mon Jan _2 15:04:05 2006"),
    ("UnixDate", "Mon Jan _2 15:04:05 MST 2006"),
    ("RubyDate", "Mon Jan 02 15:04:05 -0700 2006"),
    ("RFC822", "02 Jan 06 15:04 MST"),
    ("RFC822Z", "02 Jan 06 15:04 -0700"),
    ("RFC850", "Monday, 02-Jan-06 15:04:05 MST"),
    ("RFC1123", "Mon, 02 Jan 2006 15:04:05 MST"),
    ("RFC1123Z", "Mon, 02 Jan 2006 15:04:05 -0700"),
    ("RFC3339", RFC3339),
    ("RFC3339Nano", "2006-01-02T15:04:05.999999999Z07:00"),
    ("Kitchen", "3:04PM"),
    ("Stamp", "Jan _2 15:04:05"),
    ("StampMilli", "Jan _2 15:04:05.000"),
    ("StampMicro", "Jan _2 15:04:05.000000"),
    ("StampNano", "Jan _2 15:04:05.000000000"),
    ("DateTime", "2006-01-02 15:04:05"),
    ("DateOnly", "2006-01-02"),
    ("TimeOnly", "15:04:05"),
];

/// One element of a layout.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Chunk {
    Literal(String),
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    Pm {
        upper: bool,
    },
    /// `MST`.
    ZoneName,
    /// `-0700` and friends: the UTC offset written out, `+00...` here.
    NumZone(&'static str),
    /// `Z07:00` and friends: `Z` for UTC.
    IsoZone,
    /// `.000` (`trim` false) or `.999` (`trim` true), `sep` `.` or `,`.
    Fraction {
        sep: char,
        digits: usize,
        trim: bool,
    },
}

/// A parsed layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoLayout(Vec<Chunk>);

const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The next element of `layout` at or after byte `i`: `(start, chunk, end)`, as Go's
/// `nextStdChunk` finds it.
fn next_chunk(layout: &str, from: usize) -> Option<(usize, Chunk, usize)> {
    let b = layout.as_bytes();
    let at = |i: usize, s: &str| layout[i..].starts_with(s);
    let lower_at = |i: usize| b.get(i).is_some_and(u8::is_ascii_lowercase);
    for i in from..b.len() {
        let found = match b[i] {
            b'J' if at(i, "January") => Some((Chunk::LongMonth, 7)),
            b'J' if at(i, "Jan") && !lower_at(i + 3) => Some((Chunk::Month, 3)),
            b'M' if at(i, "Monday") => Some((Chunk::LongWeekDay, 6)),
            b'M' if at(i, "Mon") && !lower_at(i + 3) => Some((Chunk::WeekDay, 3)),
            b'M' if at(i, "MST") => Some((Chunk::ZoneName, 3)),
            b'0' if matches!(b.get(i + 1), Some(b'1'..=b'6')) => Some((
                match b[i + 1] {
                    b'1' => Chunk::ZeroMonth,
                    b'2' => Chunk::ZeroDay,
                    b'3' => Chunk::ZeroHour12,
                    b'4' => Chunk::ZeroMinute,
                    b'5' => Chunk::ZeroSecond,
                    _ => Chunk::Year,
                },
                2,
            )),
            b'0' if at(i, "002") => Some((Chunk::ZeroYearDay, 3)),
            b'1' if at(i, "15") => Some((Chunk::Hour, 2)),
            b'1' => Some((Chunk::NumMonth, 1)),
            b'2' if at(i, "2006") => Some((Chunk::LongYear, 4)),
            b'2' => Some((Chunk::Day, 1)),
            // `_2006` is a literal `_` and the year
            b'_' if at(i, "_2006") => return Some((i + 1, Chunk::LongYear, i + 5)),
            b'_' if at(i, "_2") => Some((Chunk::UnderDay, 2)),
            b'_' if at(i, "__2") => Some((Chunk::UnderYearDay, 3)),
            b'3' => Some((Chunk::Hour12, 1)),
            b'4' => Some((Chunk::Minute, 1)),
            b'5' => Some((Chunk::Second, 1)),
            b'P' if at(i, "PM") => Some((Chunk::Pm { upper: true }, 2)),
            b'p' if at(i, "pm") => Some((Chunk::Pm { upper: false }, 2)),
            b'-' => ["-070000", "-07:00:00", "-0700", "-07:00", "-07"]
                .into_iter()
                .find(|s| at(i, s))
                .map(|s| {
                    let utc = match s {
                        "-070000" => "+000000",
                        "-07:00:00" => "+00:00:00",
                        "-0700" => "+0000",
                        "-07:00" => "+00:00",
                        _ => "+00",
                    };
                    (Chunk::NumZone(utc), s.len())
                }),
            b'Z' => ["Z070000", "Z07:00:00", "Z0700", "Z07:00", "Z07"]
                .into_iter()
                .find(|s| at(i, s))
                .map(|s| (Chunk::IsoZone, s.len())),
            sep @ (b'.' | b',') if matches!(b.get(i + 1), Some(b'0' | b'9')) => {
                let ch = b[i + 1];
                let mut j = i + 1;
                while b.get(j) == Some(&ch) {
                    j += 1;
                }
                // a run of digits that goes on is not a fraction
                (!b.get(j).is_some_and(u8::is_ascii_digit)).then(|| {
                    (
                        Chunk::Fraction {
                            sep: char::from(sep),
                            digits: j - (i + 1),
                            trim: ch == b'9',
                        },
                        j - i,
                    )
                })
            }
            _ => None,
        };
        if let Some((chunk, len)) = found {
            return Some((i, chunk, i + len));
        }
    }
    None
}

impl GoLayout {
    /// Reads `layout`. Any string is a Go layout; one with no time element at all (its
    /// output never changes) or that names one of Go's constants instead of writing its
    /// layout is refused, saying why.
    pub fn parse(layout: &str) -> Result<Self, String> {
        if let Some((name, l)) = NAMED.iter().find(|(n, _)| *n == layout) {
            return Err(format!(
                "{name:?} is the name of Go's time.{name}; write its layout {l:?}"
            ));
        }
        let mut chunks = Vec::new();
        let mut at = 0;
        while let Some((start, chunk, end)) = next_chunk(layout, at) {
            if start > at {
                chunks.push(Chunk::Literal(layout[at..start].to_string()));
            }
            chunks.push(chunk);
            at = end;
        }
        if !chunks.iter().any(|c| !matches!(c, Chunk::Literal(_))) {
            return Err(format!(
                "{layout:?} has no Go time element (2006, 01, 02, 15, 04, 05, Z07:00, ...)"
            ));
        }
        if at < layout.len() {
            chunks.push(Chunk::Literal(layout[at..].to_string()));
        }
        Ok(Self(chunks))
    }

    /// `t` in UTC, formatted as Go formats it.
    pub fn format(&self, t: Timestamp) -> String {
        let dt = TimeZone::UTC.to_datetime(t);
        let (year, month, day) = (i32::from(dt.year()), dt.month(), dt.day());
        let (hour, minute, second) = (dt.hour(), dt.minute(), dt.second());
        let month_name = LONG_MONTHS[usize::from(month.unsigned_abs().clamp(1, 12)) - 1];
        let day_name =
            LONG_DAYS[usize::from(dt.weekday().to_monday_zero_offset().unsigned_abs()) % 7];
        let hour12 = match hour % 12 {
            0 => 12,
            h => h,
        };
        let mut out = String::new();
        for c in &self.0 {
            match c {
                Chunk::Literal(s) => out.push_str(s),
                Chunk::LongMonth => out.push_str(month_name),
                Chunk::Month => out.push_str(&month_name[..3]),
                Chunk::NumMonth => out.push_str(&month.to_string()),
                Chunk::ZeroMonth => out.push_str(&format!("{month:02}")),
                Chunk::LongWeekDay => out.push_str(day_name),
                Chunk::WeekDay => out.push_str(&day_name[..3]),
                Chunk::Day => out.push_str(&day.to_string()),
                Chunk::UnderDay => out.push_str(&format!("{day:>2}")),
                Chunk::ZeroDay => out.push_str(&format!("{day:02}")),
                Chunk::UnderYearDay => out.push_str(&format!("{:>3}", dt.day_of_year())),
                Chunk::ZeroYearDay => out.push_str(&format!("{:03}", dt.day_of_year())),
                Chunk::Hour => out.push_str(&format!("{hour:02}")),
                Chunk::Hour12 => out.push_str(&hour12.to_string()),
                Chunk::ZeroHour12 => out.push_str(&format!("{hour12:02}")),
                Chunk::Minute => out.push_str(&minute.to_string()),
                Chunk::ZeroMinute => out.push_str(&format!("{minute:02}")),
                Chunk::Second => out.push_str(&second.to_string()),
                Chunk::ZeroSecond => out.push_str(&format!("{second:02}")),
                Chunk::LongYear => out.push_str(&format!("{year:04}")),
                Chunk::Year => out.push_str(&format!("{:02}", year.rem_euclid(100))),
                Chunk::Pm { upper } => out.push_str(match (hour >= 12, upper) {
                    (true, true) => "PM",
                    (false, true) => "AM",
                    (true, false) => "pm",
                    (false, false) => "am",
                }),
                Chunk::ZoneName => out.push_str("UTC"),
                Chunk::NumZone(utc) => out.push_str(utc),
                Chunk::IsoZone => out.push('Z'),
                Chunk::Fraction { sep, digits, trim } => {
                    let nanos = format!("{:09}", dt.subsec_nanosecond());
                    let mut frac = &nanos[..(*digits).min(9)];
                    if *trim {
                        frac = frac.trim_end_matches('0');
                    }
                    if !frac.is_empty() {
                        out.push(*sep);
                        out.push_str(frac);
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outputs of Go's `time.Date(2024, 3, 5, 7, 8, 9, 120000000, time.UTC).Format(layout)`
    /// (each checked against go1.19.8, Debian's golang-go).
    #[test]
    fn layouts_format_as_go_formats_them() {
        let t: Timestamp = "2024-03-05T07:08:09.12Z".parse().expect("time");
        let go = |layout: &str| GoLayout::parse(layout).expect(layout).format(t);
        let named = |name: &str| {
            NAMED
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, l)| go(l))
                .expect(name)
        };
        for (name, want) in [
            ("Layout", "03/05 07:08:09AM '24 +0000"),
            ("ANSIC", "Tue Mar  5 07:08:09 2024"),
            ("UnixDate", "Tue Mar  5 07:08:09 UTC 2024"),
            ("RubyDate", "Tue Mar 05 07:08:09 +0000 2024"),
            ("RFC822", "05 Mar 24 07:08 UTC"),
            ("RFC822Z", "05 Mar 24 07:08 +0000"),
            ("RFC850", "Tuesday, 05-Mar-24 07:08:09 UTC"),
            ("RFC1123", "Tue, 05 Mar 2024 07:08:09 UTC"),
            ("RFC1123Z", "Tue, 05 Mar 2024 07:08:09 +0000"),
            ("RFC3339", "2024-03-05T07:08:09Z"),
            ("RFC3339Nano", "2024-03-05T07:08:09.12Z"),
            ("Kitchen", "7:08AM"),
            ("Stamp", "Mar  5 07:08:09"),
            ("StampMilli", "Mar  5 07:08:09.120"),
            ("StampMicro", "Mar  5 07:08:09.120000"),
            ("StampNano", "Mar  5 07:08:09.120000000"),
            ("DateTime", "2024-03-05 07:08:09"),
            ("DateOnly", "2024-03-05"),
            ("TimeOnly", "07:08:09"),
        ] {
            assert_eq!(named(name), want, "{name}");
        }
        // the less common elements
        assert_eq!(
            go("January Monday 1/2 3:4:5 pm"),
            "March Tuesday 3/5 7:8:9 am"
        );
        assert_eq!(go("002 __2 _2006"), "065  65 _2024");
        assert_eq!(
            go("15h,000 .9 -07 Z07 -07:00:00"),
            "07h,120 .1 +00 Z +00:00:00"
        );
        // `Janet` and `Monty` are words, not a month or a day
        assert_eq!(go("Janet Monty 2006"), "Janet Monty 2024");
        // a fraction of zeros only, trimmed, leaves nothing
        let whole: Timestamp = "2024-03-05T19:08:09Z".parse().expect("time");
        assert_eq!(
            GoLayout::parse("15:04:05.999 PM")
                .expect("layout")
                .format(whole),
            "19:08:09 PM"
        );
        // digits running on are not a fraction: `.0001` is `.` `0` `001`... as Go reads it
        assert_eq!(go("05.0001"), go("05") + "." + &go("0001"));
    }

    #[test]
    fn layouts_that_cannot_be_meant_are_refused() {
        let e = GoLayout::parse("RFC3339").expect_err("a name");
        assert!(e.contains("2006-01-02T15:04:05Z07:00"), "{e}");
        let e = GoLayout::parse("unix time").expect_err("no element");
        assert!(e.contains("no Go time element"), "{e}");
        assert!(GoLayout::parse("").is_err());
    }
}
