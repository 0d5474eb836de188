//! Number formatting of wrk's report: times with us/ms/s/m/h, counts with k/M/G (powers of
//! 1000), byte sizes with KB/MB/GB/TB (powers of 1024), two decimals; and the column
//! alignment that keeps the digits of a table lined up whatever the unit's length.

/// A time given in microseconds: `635.91us`, `12.92ms`, `1.57s`, `2.00m`.
pub fn time_us(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.2}us")
    } else if us < 1_000_000.0 {
        format!("{:.2}ms", us / 1000.0)
    } else if us < 60_000_000.0 {
        format!("{:.2}s", us / 1_000_000.0)
    } else if us < 3_600_000_000.0 {
        format!("{:.2}m", us / 60_000_000.0)
    } else {
        format!("{:.2}h", us / 3_600_000_000.0)
    }
}

/// A count: `409.46`, `2.99k`, `1.20M`.
pub fn metric(n: f64) -> String {
    scaled(n, 1000.0, &["", "k", "M", "G", "T"])
}

/// A byte size: `512.00B`, `128.12MB`, `0.99GB` (a unit changes from 1000 of the smaller one).
pub fn binary(n: f64) -> String {
    scaled(n, 1024.0, &["B", "KB", "MB", "GB", "TB"])
}

fn scaled(mut n: f64, base: f64, units: &[&str]) -> String {
    let mut unit = 0;
    while n >= 1000.0 && unit + 1 < units.len() {
        n /= base;
        unit += 1;
    }
    format!("{n:.2}{}", units[unit])
}

/// Right-aligns `text` in `width` columns so that the digits of values with two-letter,
/// one-letter and no units line up: a shorter unit is followed by blanks instead.
pub fn column(text: &str, width: usize) -> String {
    let letters = text
        .chars()
        .rev()
        .take(2)
        .take_while(|c| c.is_ascii_alphabetic())
        .count();
    let pad = 2 - letters;
    format!("{text:>w$}{}", " ".repeat(pad), w = width - pad)
}

/// A test duration as wrk prints it in its first line: `10s`, `2m`, `1h`.
pub fn duration_secs(secs: f64) -> String {
    let whole = secs.round() as u64;
    if whole > 0 && (whole as f64 - secs).abs() < 1e-9 {
        if whole.is_multiple_of(3600) {
            return format!("{}h", whole / 3600);
        }
        if whole.is_multiple_of(60) {
            return format!("{}m", whole / 60);
        }
        return format!("{whole}s");
    }
    format!("{secs:.2}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_match_wrk_report() {
        assert_eq!(time_us(635.91), "635.91us");
        assert_eq!(time_us(15_380.0), "15.38ms");
        assert_eq!(time_us(1_570_000.0), "1.57s");
        assert_eq!(metric(2990.0), "2.99k");
        assert_eq!(metric(409.46), "409.46");
        assert_eq!(binary(128.12 * 1024.0 * 1024.0), "128.12MB");
        assert_eq!(binary(1013.0 * 1024.0 * 1024.0), "0.99GB");
        assert_eq!(duration_secs(30.0), "30s");
        assert_eq!(duration_secs(120.0), "2m");
    }

    #[test]
    fn columns_line_up() {
        // The row "    Latency    15.38ms   37.70ms   1.57s    97.00%" of a wrk report.
        let row = format!(
            "    {:<10}{}{}{}{:>8.2}%",
            "Latency",
            column("15.38ms", 8),
            column("37.70ms", 10),
            column("1.57s", 9),
            97.0
        );
        assert_eq!(row, "    Latency    15.38ms   37.70ms   1.57s    97.00%");
        let row = format!(
            "    {:<10}{}{}{}{:>8.2}%",
            "Req/Sec",
            column("2.99k", 8),
            column("409.46", 10),
            column("5.75k", 9),
            71.4
        );
        assert_eq!(row, "    Req/Sec     2.99k   409.46     5.75k    71.40%");
    }
}
