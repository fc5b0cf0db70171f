//! The access log: one line per response in a layout log tools read.
//!
//! - `combined` is nginx's `combined` format, byte for byte, so GoAccess, fail2ban and
//!   AWStats parse it: `$remote_addr - $remote_user [$time_local] "$request" $status
//!   $body_bytes_sent "$http_referer" "$http_user_agent"`, with the time in UTC and
//!   bytes outside printable ASCII, `"` and `\` escaped as `\xHH`, as nginx does.
//! - `json` is one object per line with stable field names: `time` (RFC 3339, UTC),
//!   `peer`, `method`, `path`, `status`, `bytes` (body bytes sent), `duration`
//!   (seconds), `strategy`, `complete`, `referer`, `user_agent`.
//!
//! Lines go to stderr or `--access-log-file` through a background writer, so a slow
//! disk or terminal never stalls a worker (lines are dropped if it falls far behind).
//! A file that cannot take a line (a full disk) loses it, counted
//! (`crate::ops::log_file`), and serving goes on.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime};
use tracing_appender::non_blocking::{NonBlocking, WorkerGuard};

use crate::http::request::Request;
use crate::ops::log_file::LogFile;

/// The layout of access-log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// nginx's `combined`, for GoAccess, fail2ban, AWStats.
    #[default]
    Combined,
    /// One JSON object per line.
    Json,
}

/// What a log line says about a request, copied out of it (the request borrows the read
/// buffer, and the line is written after the response).
#[derive(Debug)]
pub(crate) struct Record {
    peer: SocketAddr,
    started: Instant,
    time: SystemTime,
    /// The protocol, for nginx's `$request` (`GET /path HTTP/1.1`); empty when no
    /// request was read.
    version: &'static str,
    method: String,
    path: String,
    referer: Option<String>,
    user_agent: Option<String>,
}

impl Record {
    /// A record of `request` from `peer`, starting now.
    pub fn new(peer: SocketAddr, request: &Request<'_>) -> Record {
        let version = request.version.name();
        let text = |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8_lossy(b).into_owned());
        Record {
            peer,
            started: Instant::now(),
            time: SystemTime::now(),
            version,
            method: request.method.as_str().to_owned(),
            path: request.target.to_owned(),
            referer: text(request.referer),
            user_agent: text(request.user_agent),
        }
    }

    /// A record of a connection refused before a request could be read.
    pub fn refused(peer: SocketAddr) -> Record {
        Record {
            peer,
            started: Instant::now(),
            time: SystemTime::now(),
            version: "",
            method: String::new(),
            path: String::new(),
            referer: None,
            user_agent: None,
        }
    }
}

/// How a response ended, for its log line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome {
    /// The status sent.
    pub status: u16,
    /// Body bytes written.
    pub bytes: u64,
    /// The IO strategy's name.
    pub strategy: &'static str,
    /// Whether the whole body went out.
    pub complete: bool,
}

/// The access log's writer.
#[derive(Clone, Debug)]
pub(crate) struct AccessLog {
    format: Format,
    writer: NonBlocking,
}

impl AccessLog {
    /// A log in `format` to `file` (appended to, created if missing) or stderr; the
    /// guard flushes the background writer when dropped.
    pub fn open(format: Format, file: Option<&Path>) -> std::io::Result<(AccessLog, WorkerGuard)> {
        let (writer, guard) = match file {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?;
                tracing_appender::non_blocking(LogFile::new(file, path.to_path_buf()))
            }
            None => tracing_appender::non_blocking(std::io::stderr()),
        };
        Ok((AccessLog { format, writer }, guard))
    }

    /// Writes the line of one response.
    pub fn write(&self, record: &Record, outcome: Outcome) {
        let line = line(self.format, record, outcome, record.started.elapsed());
        // NonBlocking hands the line to the writer thread; it cannot fail here.
        let _ = self.writer.clone().write_all(line.as_bytes());
    }
}

/// One line, newline included.
fn line(format: Format, record: &Record, outcome: Outcome, duration: Duration) -> String {
    match format {
        Format::Combined => {
            let mut line = String::with_capacity(160);
            let request = if record.version.is_empty() {
                "-".to_owned()
            } else {
                escape(&format!(
                    "{} {} {}",
                    record.method, record.path, record.version
                ))
            };
            let quoted = |value: &Option<String>| value.as_deref().map_or("-".to_owned(), escape);
            let _ = writeln!(
                line,
                "{} - - [{}] \"{request}\" {} {} \"{}\" \"{}\"",
                record.peer.ip(),
                time_local(record.time),
                outcome.status,
                outcome.bytes,
                quoted(&record.referer),
                quoted(&record.user_agent),
            );
            line
        }
        Format::Json => {
            #[derive(Serialize)]
            struct Line<'a> {
                time: String,
                peer: String,
                method: &'a str,
                path: &'a str,
                status: u16,
                bytes: u64,
                duration: f64,
                strategy: &'a str,
                complete: bool,
                referer: Option<&'a str>,
                user_agent: Option<&'a str>,
            }
            let line = Line {
                time: rfc3339(record.time),
                peer: record.peer.to_string(),
                method: &record.method,
                path: &record.path,
                status: outcome.status,
                bytes: outcome.bytes,
                duration: duration.as_secs_f64(),
                strategy: outcome.strategy,
                complete: outcome.complete,
                referer: record.referer.as_deref(),
                user_agent: record.user_agent.as_deref(),
            };
            let mut text = serde_json::to_string(&line).unwrap_or_default();
            text.push('\n');
            text
        }
    }
}

/// nginx's escaping of logged strings: `"`, `\`, control bytes and bytes past ASCII
/// become `\xHH`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b as char);
        }
    }
    out
}

/// nginx's `$time_local`, always in UTC.
const TIME_LOCAL: &[BorrowedFormatItem<'_>] =
    format_description!("[day]/[month repr:short]/[year]:[hour]:[minute]:[second] +0000");

/// RFC 3339 in UTC with milliseconds (truncated, not rounded).
const RFC3339_MILLIS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// `time` in UTC on the proleptic Gregorian calendar (times before 1970 count back); a
/// time outside the years -9999 to 9999 that `time` represents is clamped to the
/// nearest end rather than refused, since a log line is written whatever the clock says.
fn utc(time: SystemTime) -> OffsetDateTime {
    let (since_epoch, limit) = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => (time::Duration::try_from(after).ok(), PrimitiveDateTime::MAX),
        Err(before) => (
            time::Duration::try_from(before.duration()).ok().map(|d| -d),
            PrimitiveDateTime::MIN,
        ),
    };
    since_epoch
        .and_then(|d| OffsetDateTime::UNIX_EPOCH.checked_add(d))
        .unwrap_or_else(|| limit.assume_utc())
}

/// `time` written with `format`; formatting a UTC date of years -9999 to 9999 into a
/// `String` cannot fail, so the empty string is never seen.
fn format_utc(time: SystemTime, format: &[BorrowedFormatItem<'_>]) -> String {
    utc(time).format(format).unwrap_or_default()
}

/// nginx's `$time_local` in UTC: `10/Oct/2000:13:55:36 +0000`.
fn time_local(time: SystemTime) -> String {
    format_utc(time, TIME_LOCAL)
}

/// RFC 3339 in UTC with milliseconds: `2000-10-10T13:55:36.123Z`.
fn rfc3339(time: SystemTime) -> String {
    format_utc(time, RFC3339_MILLIS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            peer: "192.0.2.7:51234".parse().unwrap(),
            started: Instant::now(),
            time: UNIX_EPOCH + Duration::from_millis(971_186_136_123),
            version: "HTTP/1.1",
            method: "GET".into(),
            path: "/a \"b\".iso".into(),
            referer: None,
            user_agent: Some("curl/7.88.1 \u{e9}".into()),
        }
    }

    const OUTCOME: Outcome = Outcome {
        status: 206,
        bytes: 1024,
        strategy: "sendfile",
        complete: true,
    };

    #[test]
    fn combined_is_nginx_layout() {
        let line = line(
            Format::Combined,
            &record(),
            OUTCOME,
            Duration::from_millis(5),
        );
        assert_eq!(
            line,
            "192.0.2.7 - - [10/Oct/2000:13:55:36 +0000] \"GET /a \\x22b\\x22.iso HTTP/1.1\" 206 1024 \"-\" \"curl/7.88.1 \\xC3\\xA9\"\n"
        );
        let refused = line_of_refused();
        assert!(refused.contains("] \"-\" 503 0 \"-\" \"-\""), "{refused}");
    }

    fn line_of_refused() -> String {
        let record = Record::refused("[2001:db8::1]:80".parse().unwrap());
        let outcome = Outcome {
            status: 503,
            bytes: 0,
            ..OUTCOME
        };
        line(Format::Combined, &record, outcome, Duration::ZERO)
    }

    #[test]
    fn json_has_stable_fields() {
        let line = line(Format::Json, &record(), OUTCOME, Duration::from_millis(5));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["time"], "2000-10-10T13:55:36.123Z");
        assert_eq!(v["peer"], "192.0.2.7:51234");
        assert_eq!(
            (v["method"].as_str(), v["path"].as_str()),
            (Some("GET"), Some("/a \"b\".iso"))
        );
        assert_eq!(
            (v["status"].as_u64(), v["bytes"].as_u64()),
            (Some(206), Some(1024))
        );
        assert_eq!(v["duration"], 0.005);
        assert_eq!(
            (v["strategy"].as_str(), v["complete"].as_bool()),
            (Some("sendfile"), Some(true))
        );
        assert!(v["referer"].is_null());
        assert!(line.ends_with("}\n"));
    }

    #[test]
    fn calendar_dates() {
        for (secs, expected) in [
            (0i64, "01/Jan/1970:00:00:00 +0000"),
            (951_782_400, "29/Feb/2000:00:00:00 +0000"),
            (253_402_300_799, "31/Dec/9999:23:59:59 +0000"),
            (-86_400, "31/Dec/1969:00:00:00 +0000"),
        ] {
            let time = if secs >= 0 {
                UNIX_EPOCH + Duration::from_secs(secs as u64)
            } else {
                UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
            };
            assert_eq!(time_local(time), expected);
        }
    }

    /// A time `secs` seconds and `millis` milliseconds from the epoch (negative: before).
    fn at(secs: i64, millis: u64) -> SystemTime {
        let whole = Duration::from_secs(secs.unsigned_abs());
        let after = Duration::from_millis(millis);
        if secs >= 0 {
            UNIX_EPOCH + whole + after
        } else {
            UNIX_EPOCH - whole + after
        }
    }

    #[test]
    fn known_instants_in_both_layouts() {
        for (time, local, rfc) in [
            (
                at(971_186_136, 123),
                "10/Oct/2000:13:55:36 +0000",
                "2000-10-10T13:55:36.123Z",
            ),
            // Leap days: in a century year divisible by 400, and in an ordinary one;
            // 2100 has none.
            (
                at(951_868_799, 999),
                "29/Feb/2000:23:59:59 +0000",
                "2000-02-29T23:59:59.999Z",
            ),
            (
                at(1_709_210_096, 7),
                "29/Feb/2024:12:34:56 +0000",
                "2024-02-29T12:34:56.007Z",
            ),
            (
                at(1_709_251_200, 0),
                "01/Mar/2024:00:00:00 +0000",
                "2024-03-01T00:00:00.000Z",
            ),
            // Past a signed 32-bit time_t.
            (
                at(2_147_483_648, 500),
                "19/Jan/2038:03:14:08 +0000",
                "2038-01-19T03:14:08.500Z",
            ),
            (
                at(4_107_542_400, 0),
                "01/Mar/2100:00:00:00 +0000",
                "2100-03-01T00:00:00.000Z",
            ),
            // Before 1970, in whole seconds.
            (
                at(-14_182_940, 0),
                "20/Jul/1969:20:17:40 +0000",
                "1969-07-20T20:17:40.000Z",
            ),
            (
                at(-2_203_891_200, 0),
                "01/Mar/1900:00:00:00 +0000",
                "1900-03-01T00:00:00.000Z",
            ),
            // Past the year 9999: clamped to its last instant.
            (
                at(253_402_300_800, 0),
                "31/Dec/9999:23:59:59 +0000",
                "9999-12-31T23:59:59.999Z",
            ),
        ] {
            assert_eq!(
                (time_local(time).as_str(), rfc3339(time).as_str()),
                (local, rfc)
            );
        }
    }
}
