//! The HTML listing: one page with its style inline and no script, so that it needs
//! nothing from another origin and its `Content-Security-Policy` allows exactly that
//! style (by hash) and nothing else.
//!
//! Names are escaped as HTML text; links carry their bytes percent-encoded. Sizes are
//! in IEC units with the exact count in `title` and `data-bytes`; times are UTC in a
//! `<time datetime>` element. The column headers are links that toggle the order.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::LazyLock;

use ioserve_simd::base64::STANDARD;
use sha2::{Digest as _, Sha256};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::OffsetDateTime;

use super::entry::Entry;
use super::sort::{Direction, Sort, SortKey};

/// The page's only style, inline.
const STYLE: &str = include_str!("style.css");

/// The `Content-Security-Policy` of an HTML listing: nothing but the inline style,
/// allowed by its SHA-256 (computed once).
pub(crate) fn content_security_policy() -> &'static str {
    static POLICY: LazyLock<String> = LazyLock::new(|| {
        format!(
            "default-src 'none'; style-src 'sha256-{}'",
            STANDARD.encode(Sha256::digest(STYLE.as_bytes()))
        )
    });
    &POLICY
}

/// What the page shows.
pub(crate) struct Page<'a> {
    /// The directory's path below the root (empty for the root).
    pub relative: &'a Path,
    /// The shown entries, in order.
    pub entries: &'a [Entry],
    /// The order they are in.
    pub sort: Sort,
    /// Entries left out by the bound.
    pub omitted: usize,
    /// The bound.
    pub max_entries: usize,
}

impl Page<'_> {
    /// The whole page.
    pub(crate) fn render(&self) -> String {
        let segments: Vec<String> = self
            .relative
            .iter()
            .map(|segment| segment.to_string_lossy().into_owned())
            .collect();
        let mut title = String::from("/");
        for segment in &segments {
            title.push_str(segment);
            title.push('/');
        }
        let mut html = String::with_capacity(STYLE.len() + 1024 + self.entries.len() * 256);
        let _ = write!(
            html,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <meta name=\"color-scheme\" content=\"light dark\">\n\
             <title>Index of {title}</title>\n<style>{STYLE}</style></head>\n<body>\n",
            title = escape(&title)
        );
        breadcrumbs(&mut html, &segments);
        let _ = writeln!(html, "<main>\n<h1>Index of {}</h1>", escape(&title));
        html.push_str("<p><a download href=\"?download=tar\">Download as tar</a></p>\n");
        self.table(&mut html, !segments.is_empty());
        if self.omitted > 0 {
            let _ = writeln!(
                html,
                "<p>{} more entries are not listed (--listing-max-entries {}).</p>",
                self.omitted, self.max_entries
            );
        }
        html.push_str("</main>\n</body></html>\n");
        html
    }

    fn table(&self, html: &mut String, has_parent: bool) {
        let direction = match self.sort.direction {
            Direction::Ascending => "ascending",
            Direction::Descending => "descending",
        };
        let _ = writeln!(
            html,
            "<table>\n<caption>Sorted by {key}, {direction}; directories first.</caption>",
            key = self.sort.key.as_str(),
        );
        html.push_str("<thead><tr>");
        for key in SortKey::ALL {
            let (label, class) = match key {
                SortKey::Name => ("Name", ""),
                SortKey::Size => ("Size", " class=\"size\""),
                SortKey::Time => ("Modified", " class=\"time\""),
            };
            let (aria_sort, arrow) = match (key == self.sort.key, self.sort.direction) {
                (false, _) => ("", ""),
                (true, Direction::Ascending) => (" aria-sort=\"ascending\"", " ▲"),
                (true, Direction::Descending) => (" aria-sort=\"descending\"", " ▼"),
            };
            let toggled = self.sort.toggled(key).to_string().replace('&', "&amp;");
            let _ = write!(
                html,
                "<th scope=\"col\"{class}{aria_sort}><a class=\"sort\" href=\"?{toggled}\">{label}\
                 <span aria-hidden=\"true\">{arrow}</span></a></th>"
            );
        }
        html.push_str("</tr></thead>\n<tbody>\n");
        if has_parent {
            html.push_str(
                "<tr><td><a href=\"../\">Parent directory</a></td><td></td><td></td></tr>\n",
            );
        }
        for entry in self.entries {
            let suffix = if entry.kind == "dir" { "/" } else { "" };
            let _ = write!(
                html,
                "<tr><td><a href=\"{href}{suffix}\">{name}{suffix}</a></td>",
                href = entry.href,
                name = escape(&entry.name),
            );
            if entry.kind == "dir" {
                html.push_str("<td class=\"size\">-</td>");
            } else {
                let _ = write!(
                    html,
                    "<td class=\"size\" title=\"{bytes} bytes\" data-bytes=\"{bytes}\">{iec}</td>",
                    bytes = entry.size,
                    iec = iec_size(entry.size),
                );
            }
            match utc_time(entry.modified) {
                Some(time) => {
                    // A narrow screen breaks the line between day and clock only.
                    let _ = writeln!(
                        html,
                        "<td class=\"time\"><time datetime=\"{}\"><span>{}</span> <span>{}</span></time></td></tr>",
                        time.rfc3339, time.day, time.clock
                    );
                }
                // A time beyond what a date can show is left blank.
                None => html.push_str("<td class=\"time\"></td></tr>\n"),
            }
        }
        html.push_str("</tbody>\n</table>\n");
    }
}

/// The breadcrumbs: a link to each directory above this one (relative, so that they
/// work below a proxy's prefix too), the current one named.
fn breadcrumbs(html: &mut String, segments: &[String]) {
    html.push_str("<header><nav aria-label=\"Breadcrumb\"><ol>");
    let up = |levels: usize| "../".repeat(levels);
    if segments.is_empty() {
        html.push_str("<li aria-current=\"page\">Root</li>");
    } else {
        let _ = write!(
            html,
            "<li><a class=\"crumb\" href=\"{}\">Root</a></li>",
            up(segments.len())
        );
    }
    for (depth, segment) in segments.iter().enumerate() {
        let levels_up = segments.len() - 1 - depth;
        if levels_up == 0 {
            let _ = write!(html, "<li aria-current=\"page\">{}</li>", escape(segment));
        } else {
            let _ = write!(
                html,
                "<li><a class=\"crumb\" href=\"{}\">{}</a></li>",
                up(levels_up),
                escape(segment)
            );
        }
    }
    html.push_str("</ol></nav></header>\n");
}

/// A size in IEC units with one decimal (`4.0 GiB`); below 1 KiB in bytes (`512 B`).
pub(crate) fn iec_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    // 1023.96 KiB would print as 1024.0 KiB: such a value goes up a unit.
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A modification time as the page shows it, UTC.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UtcTime {
    /// RFC 3339, for `datetime`: `2026-11-26T02:10:00Z`.
    pub rfc3339: String,
    /// The day: `2026-11-26`.
    pub day: String,
    /// Hours and minutes: `02:10`.
    pub clock: String,
}

/// Seconds since the epoch as the page shows them; `None` beyond the years a date can
/// show.
pub(crate) fn utc_time(secs: i64) -> Option<UtcTime> {
    let time = OffsetDateTime::from_unix_timestamp(secs).ok()?;
    Some(UtcTime {
        rfc3339: time.format(&Rfc3339).ok()?,
        day: time
            .format(format_description!("[year]-[month]-[day]"))
            .ok()?,
        clock: time.format(format_description!("[hour]:[minute]")).ok()?,
    })
}

/// Escapes text for HTML text and quoted attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_in_iec_units_with_one_decimal() {
        for (bytes, text) in [
            (0, "0 B"),
            (512, "512 B"),
            (1023, "1023 B"),
            (1024, "1.0 KiB"),
            (1536, "1.5 KiB"),
            (1024 * 1024 - 1, "1.0 MiB"),
            (10 * 1024 * 1024, "10.0 MiB"),
            (4 << 30, "4.0 GiB"),
            (5 << 40, "5.0 TiB"),
            (u64::MAX, "16.0 EiB"),
        ] {
            assert_eq!(iec_size(bytes), text, "{bytes}");
        }
    }

    #[test]
    fn times_are_utc_in_rfc_3339_and_readable() {
        let time = |rfc3339: &str, day: &str, clock: &str| UtcTime {
            rfc3339: rfc3339.to_owned(),
            day: day.to_owned(),
            clock: clock.to_owned(),
        };
        assert_eq!(
            utc_time(1_795_659_000),
            Some(time("2026-11-26T02:10:00Z", "2026-11-26", "02:10"))
        );
        assert_eq!(
            utc_time(0),
            Some(time("1970-01-01T00:00:00Z", "1970-01-01", "00:00"))
        );
        assert_eq!(utc_time(i64::MAX), None);
    }

    #[test]
    fn the_policy_allows_the_inline_style_by_its_hash() {
        let policy = content_security_policy();
        let hash = STANDARD.encode(Sha256::digest(STYLE.as_bytes()));
        assert_eq!(
            policy,
            format!("default-src 'none'; style-src 'sha256-{hash}'")
        );
        assert!(!policy.contains("unsafe"));
    }

    #[test]
    fn breadcrumbs_link_every_directory_above() {
        let mut html = String::new();
        breadcrumbs(
            &mut html,
            &["a".to_owned(), "b <c>".to_owned(), "d".to_owned()],
        );
        assert_eq!(
            html,
            "<header><nav aria-label=\"Breadcrumb\"><ol>\
             <li><a class=\"crumb\" href=\"../../../\">Root</a></li>\
             <li><a class=\"crumb\" href=\"../../\">a</a></li>\
             <li><a class=\"crumb\" href=\"../\">b &lt;c&gt;</a></li>\
             <li aria-current=\"page\">d</li></ol></nav></header>\n"
        );
        let mut root = String::new();
        breadcrumbs(&mut root, &[]);
        assert!(root.contains("<li aria-current=\"page\">Root</li>"));
    }
}
