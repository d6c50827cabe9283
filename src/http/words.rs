//! A schedule in words for the dashboard ("every 5 minutes", "at 02:30 every day"): the
//! common shapes of cron expressions only. Anything else is `None`, and the page shows the
//! expression as written (always shown beside the words).

/// `expression` (five or six fields, or an alias) in words, when it has a common shape.
pub fn describe(expression: &str) -> Option<String> {
    let expanded = match expression.trim() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        other => other,
    };
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    match fields.as_slice() {
        ["*", "*", "*", "*", "*", "*"] => Some("every second".into()),
        [second, "*", "*", "*", "*", "*"] => every(second, "second"),
        ["0", minute, "*", "*", "*", "*"] | [minute, "*", "*", "*", "*"] => minutely(minute),
        ["0", minute, hour, day, "*", weekday] | [minute, hour, day, "*", weekday] => {
            let time = at(hour, minute)?;
            let days = days(day, weekday)?;
            Some(format!("{time} {days}"))
        }
        _ => None,
    }
}

/// `*/n` of a unit, or `*`.
fn every(field: &str, unit: &str) -> Option<String> {
    match field {
        "*" => Some(format!("every {unit}")),
        _ => {
            let n: u32 = field.strip_prefix("*/")?.parse().ok()?;
            Some(format!("every {n} {unit}s"))
        }
    }
}

/// A minute field of an hourly-or-more-often expression.
fn minutely(minute: &str) -> Option<String> {
    if let Ok(m) = minute.parse::<u32>() {
        return Some(format!("every hour at minute {m}"));
    }
    every(minute, "minute")
}

/// "at HH:MM" for fixed numbers, "every hour at minute M" for `*` hours.
fn at(hour: &str, minute: &str) -> Option<String> {
    let minute: u32 = minute.parse().ok()?;
    if hour == "*" {
        return Some(format!("every hour at minute {minute}"));
    }
    let hours: Vec<u32> = hour
        .split(',')
        .map(|h| h.parse().ok())
        .collect::<Option<_>>()?;
    let times: Vec<String> = hours
        .iter()
        .map(|h| format!("{h:02}:{minute:02}"))
        .collect();
    Some(format!("at {}", times.join(", ")))
}

/// The day-of-month and weekday fields.
fn days(day: &str, weekday: &str) -> Option<String> {
    const NAMES: [&str; 8] = [
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    ];
    match (day, weekday) {
        ("*", "*") => Some("every day".into()),
        ("*", "1-5") => Some("on weekdays".into()),
        ("*", "0,6" | "6,0") => Some("at weekends".into()),
        ("*", w) => {
            let names: Vec<&str> = w
                .split(',')
                .map(|d| d.parse::<usize>().ok().and_then(|d| NAMES.get(d).copied()))
                .collect::<Option<_>>()?;
            Some(format!("on {}", names.join(", ")))
        }
        (d, "*") => {
            let d: u32 = d.parse().ok()?;
            Some(format!("on day {d} of every month"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn common_shapes_read_as_words() {
        for (expression, words) in [
            ("* * * * *", "every minute"),
            ("*/5 * * * *", "every 5 minutes"),
            ("* * * * * *", "every second"),
            ("*/10 * * * * *", "every 10 seconds"),
            ("15 * * * *", "every hour at minute 15"),
            ("30 2 * * *", "at 02:30 every day"),
            ("0 9,17 * * 1-5", "at 09:00, 17:00 on weekdays"),
            ("0 3 * * 0", "at 03:00 on Sunday"),
            ("0 4 1 * *", "at 04:00 on day 1 of every month"),
            ("@daily", "at 00:00 every day"),
            ("@hourly", "every hour at minute 0"),
        ] {
            assert_eq!(describe(expression).as_deref(), Some(words), "{expression}");
        }
    }

    #[test]
    fn other_shapes_have_no_words() {
        for expression in ["0 0 L * *", "1-5/2 3 * 2 *", "0 0 1 * 1", "nonsense"] {
            assert_eq!(describe(expression), None, "{expression}");
        }
    }
}
