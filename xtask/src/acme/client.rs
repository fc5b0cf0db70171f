//! What a client sees of ioserve: the certificate a fresh TLS handshake presents
//! (`openssl s_client`, read with `openssl x509`: no verification, so that a chain to
//! a pebble that has since restarted still shows its dates and serial), verified
//! downloads (curl trusting pebble's root), plain HTTP answers (the redirect
//! listener) and Prometheus metrics.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};

use super::process::output_within;

/// How long one handshake may take: ioserve holds handshakes for up to ~30 s while it
/// has no certificate yet.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(45);
/// How long a download or a metrics request may take.
const CURL_LIMIT: Duration = Duration::from_secs(60);

/// The certificate a handshake presented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServedCert {
    /// The serial, upper-case hexadecimal without leading zeros.
    pub(crate) serial: String,
    /// notBefore, in Unix seconds.
    pub(crate) not_before: i64,
    /// notAfter, in Unix seconds.
    pub(crate) not_after: i64,
    /// The issuer, as openssl prints it (`CN = Pebble Intermediate CA 1a2b3c`).
    pub(crate) issuer: String,
    /// The subjectAltName's DNS names.
    pub(crate) names: Vec<String>,
}

impl ServedCert {
    /// An error unless the certificate names `name`.
    pub(crate) fn must_name(&self, name: &str) -> Result<()> {
        ensure!(
            self.names.iter().any(|named| named == name),
            "expected a certificate for {name}; the one served names {:?} (serial {}, issuer {})",
            self.names,
            self.serial,
            self.issuer
        );
        Ok(())
    }
}

/// A fresh TLS handshake with 127.0.0.1:`port` for the server name `name`: the
/// certificate it presented.
pub(crate) fn handshake(port: u16, name: &str) -> Result<ServedCert> {
    let mut command = Command::new("openssl");
    command
        .args(["s_client", "-connect", &format!("127.0.0.1:{port}")])
        .args(["-servername", name]);
    let output = output_within(
        &format!("openssl s_client -connect 127.0.0.1:{port} -servername {name}"),
        command,
        None,
        HANDSHAKE_LIMIT,
    )?;
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(pem) = first_pem(&text) else {
        bail!(
            "the handshake with 127.0.0.1:{port} ({name}) presented no certificate ({}): {}",
            output.status,
            last_lines(&String::from_utf8_lossy(&output.stderr), 4)
        );
    };
    describe(pem.as_bytes())
}

/// The first PEM certificate in `text`.
fn first_pem(text: &str) -> Option<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = text.find(BEGIN)?;
    let end = start + text[start..].find(END)? + END.len();
    Some(&text[start..end])
}

/// The serial, dates, issuer and names of the PEM certificate `pem`
/// (`openssl x509`).
pub(crate) fn describe(pem: &[u8]) -> Result<ServedCert> {
    let mut command = Command::new("openssl");
    command.args([
        "x509",
        "-noout",
        "-serial",
        "-startdate",
        "-enddate",
        "-issuer",
        "-ext",
        "subjectAltName",
    ]);
    let output = output_within("openssl x509", command, Some(pem), CURL_LIMIT)?;
    ensure!(
        output.status.success(),
        "openssl x509 cannot read the certificate ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    parse_x509_text(&String::from_utf8_lossy(&output.stdout))
}

/// The subject of the PEM certificate `pem` as openssl prints it (`CN = ...`), to
/// compare with a [`ServedCert::issuer`].
pub(crate) fn subject(pem: &[u8]) -> Result<String> {
    let mut command = Command::new("openssl");
    command.args(["x509", "-noout", "-subject"]);
    let output = output_within("openssl x509 -subject", command, Some(pem), CURL_LIMIT)?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim()
        .strip_prefix("subject=")
        .map(|subject| subject.trim().to_owned())
        .with_context(|| format!("openssl x509 -subject printed {text:?}"))
}

/// [`ServedCert`] from `openssl x509 -noout -serial -startdate -enddate -issuer -ext
/// subjectAltName`'s output.
fn parse_x509_text(text: &str) -> Result<ServedCert> {
    let field = |key: &str| {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(key))
            .map(str::trim)
            .with_context(|| format!("openssl x509 printed no {key}: {text}"))
    };
    let serial = field("serial=")?
        .trim_start_matches('0')
        .to_ascii_uppercase();
    let not_before = parse_openssl_time(field("notBefore=")?)?;
    let not_after = parse_openssl_time(field("notAfter=")?)?;
    let issuer = field("issuer=")?.to_owned();
    let names = text
        .lines()
        .skip_while(|line| !line.contains("Subject Alternative Name"))
        .nth(1)
        .unwrap_or_default()
        .split(',')
        .filter_map(|entry| entry.trim().strip_prefix("DNS:"))
        .map(str::to_owned)
        .collect();
    Ok(ServedCert {
        serial,
        not_before,
        not_after,
        issuer,
        names,
    })
}

/// Unix seconds of openssl's `Nov 28 16:43:11 2026 GMT`.
pub(crate) fn parse_openssl_time(text: &str) -> Result<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [month, day, clock, year, "GMT"] = parts[..] else {
        bail!("not an openssl time: {text:?}");
    };
    let month = MONTHS
        .iter()
        .position(|name| *name == month)
        .with_context(|| format!("no month in {text:?}"))? as i64
        + 1;
    let number = |part: &str| {
        part.parse::<i64>()
            .with_context(|| format!("not a number: {part:?} in {text:?}"))
    };
    let clock: Vec<&str> = clock.split(':').collect();
    let [hours, minutes, seconds] = clock[..] else {
        bail!("no HH:MM:SS in {text:?}");
    };
    let days = days_from_civil(number(year)?, month, number(day)?);
    Ok(days * 86_400 + number(hours)? * 3_600 + number(minutes)? * 60 + number(seconds)?)
}

/// Days from 1970-01-01 to the proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Downloads `https://NAME:PORT/PATH` with curl, trusting only `root`, NAME resolved
/// to 127.0.0.1, into `out`.
pub(crate) fn download(root: &Path, name: &str, port: u16, path: &str, out: &Path) -> Result<()> {
    let url = format!("https://{name}:{port}/{path}");
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--fail", "--max-time", "50"])
        .arg("--cacert")
        .arg(root)
        .arg("--resolve")
        .arg(format!("{name}:{port}:127.0.0.1"))
        .arg("--output")
        .arg(out)
        .arg(&url);
    let output = output_within(&format!("curl {url}"), command, None, CURL_LIMIT)?;
    ensure!(
        output.status.success(),
        "curl --cacert {} {url}: {} ({})",
        root.display(),
        String::from_utf8_lossy(&output.stderr).trim(),
        output.status
    );
    Ok(())
}

/// Downloads `path` from ioserve over HTTP/3 with quic-go's client (h3get, built under
/// the target directory), verifying the certificate against `root` for `name`, and
/// compares what came with the file at `local` by length and SHA-256: ACME's
/// certificate serves QUIC handshakes too.
pub(crate) fn http3_download_matches(
    root: &Path,
    name: &str,
    port: u16,
    path: &str,
    local: &Path,
) -> Result<()> {
    let h3get = crate::util::target_dir()?.join("http3/h3get");
    if let Some(dir) = h3get.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::http3::build_h3get(&h3get)?;
    let url = format!("https://127.0.0.1:{port}/{path}");
    let mut command = Command::new(&h3get);
    command
        .arg("-ca")
        .arg(root)
        .args(["-servername", name])
        .arg(&url);
    let output = output_within(&format!("h3get {url}"), command, None, CURL_LIMIT)?;
    let printed = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success(),
        "h3get -ca {} -servername {name} {url}: {}{} ({})",
        root.display(),
        printed.trim(),
        String::from_utf8_lossy(&output.stderr).trim(),
        output.status
    );
    let response: serde_json::Value = serde_json::from_str(printed.trim())
        .with_context(|| format!("h3get printed no response: {printed}"))?;
    let expected = std::fs::read(local)?;
    let sha256 = crate::http3::sha256_hex(&expected);
    ensure!(
        response["status"] == 200
            && response["proto"] == "HTTP/3.0"
            && response["length"] == expected.len()
            && response["sha256"] == sha256.as_str(),
        "over HTTP/3, {url} (as {name}): expected 200 with the {} bytes of {} (SHA-256 \
         {sha256}), got {printed}",
        expected.len(),
        local.display()
    );
    Ok(())
}

/// Downloads `path` from ioserve (see [`download`]) and compares it byte for byte with
/// the file at `local`.
pub(crate) fn download_matches(
    root: &Path,
    name: &str,
    port: u16,
    path: &str,
    local: &Path,
) -> Result<()> {
    let out = local.with_extension("downloaded");
    download(root, name, port, path, &out)?;
    let expected = std::fs::read(local)?;
    let got = std::fs::read(&out)?;
    let _ = std::fs::remove_file(&out);
    if expected != got {
        let first = expected
            .iter()
            .zip(&got)
            .position(|(a, b)| a != b)
            .unwrap_or(expected.len().min(got.len()));
        bail!(
            "https://{name}:{port}/{path}: expected the {} bytes of {}, got {} bytes, \
             differing from byte {first}",
            expected.len(),
            local.display(),
            got.len()
        );
    }
    eprintln!(
        "xtask acme: https://{name}:{port}/{path}: {} bytes, byte-exact (verified against {})",
        got.len(),
        root.display()
    );
    Ok(())
}

/// The status code and Location of a plain `GET url` (no redirect followed).
pub(crate) fn http_status(url: &str) -> Result<(u16, String)> {
    let text = curl(
        url,
        &[
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code} %{redirect_url}",
        ],
    )?;
    let (code, location) = text.split_once(' ').unwrap_or((&text, ""));
    Ok((
        code.trim()
            .parse()
            .with_context(|| format!("curl printed {text:?}"))?,
        location.trim().to_owned(),
    ))
}

/// The text of `GET url` (ioserve's /metrics), which must answer 2xx.
pub(crate) fn get_text(url: &str) -> Result<String> {
    curl(url, &["--fail"])
}

/// curl's standard output for `url` with `args` (at most 10 s), or an error with what
/// it said.
fn curl(url: &str, args: &[&str]) -> Result<String> {
    let mut command = Command::new("curl");
    command
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .arg(url);
    let output = output_within(&format!("curl {url}"), command, None, CURL_LIMIT)?;
    ensure!(
        output.status.success(),
        "curl {url}: {} ({})",
        String::from_utf8_lossy(&output.stderr).trim(),
        output.status
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The sum of the samples of `metric` whose labels include every pair of `labels`, in
/// Prometheus' text format; None when no sample matches.
pub(crate) fn metric(text: &str, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut sum = None;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        if &line[..name_end] != metric {
            continue;
        }
        let (found, rest) = if line[name_end..].starts_with('{') {
            let Some(close) = line.rfind('}') else {
                continue;
            };
            (parse_labels(&line[name_end + 1..close]), &line[close + 1..])
        } else {
            (Vec::new(), &line[name_end..])
        };
        let wanted = labels.iter().all(|(key, value)| {
            found
                .iter()
                .any(|(found_key, found_value)| found_key == key && found_value == value)
        });
        let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|value| value.parse::<f64>().ok())
        else {
            continue;
        };
        if wanted {
            *sum.get_or_insert(0.0) += value;
        }
    }
    sum
}

/// `key="value",...` (values with `\"`, `\\` and `\n` escapes) as pairs.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once('=') {
        let key = key.trim().trim_start_matches(',').trim().to_owned();
        let Some(after) = after.trim_start().strip_prefix('"') else {
            break;
        };
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((at, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, escaped)) => value.push(escaped),
                    None => {}
                },
                '"' => {
                    end = at + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        pairs.push((key, value));
        rest = &after[end..];
    }
    pairs
}

/// The last `count` lines of `text`, joined with " | ".
pub(crate) fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(count)..].join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_times_are_unix_seconds() {
        assert_eq!(parse_openssl_time("Jan  1 00:00:00 1970 GMT").unwrap(), 0);
        assert_eq!(
            parse_openssl_time("Nov 26 02:10:00 2026 GMT").unwrap(),
            1_795_659_000
        );
        assert_eq!(
            parse_openssl_time("Feb 29 12:00:01 2028 GMT").unwrap(),
            1_835_438_401
        );
        assert!(parse_openssl_time("2026-11-26 02:10:00Z").is_err());
    }

    #[test]
    fn openssl_x509_text_is_read() {
        let text = "serial=0A1B2C3D\nnotBefore=Nov 28 16:43:11 2026 GMT\n\
            notAfter=Nov 28 16:44:10 2026 GMT\nissuer=CN = Pebble Intermediate CA 6acd00\n\
            X509v3 Subject Alternative Name: critical\n    DNS:ioserve-acme.test, DNS:b.test\n";
        let cert = parse_x509_text(text).unwrap();
        assert_eq!(cert.serial, "A1B2C3D");
        assert_eq!(cert.not_after - cert.not_before, 59);
        assert_eq!(cert.issuer, "CN = Pebble Intermediate CA 6acd00");
        assert_eq!(cert.names, vec!["ioserve-acme.test", "b.test"]);
        assert!(cert.must_name("b.test").is_ok());
        assert!(cert.must_name("c.test").is_err());
    }

    #[test]
    fn the_first_pem_block_is_found() {
        let text = "CONNECTED\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n\
            subject=...\n-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n";
        assert_eq!(
            first_pem(text),
            Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----")
        );
        assert_eq!(first_pem("no certificate"), None);
    }

    #[test]
    fn metrics_are_summed_over_matching_labels() {
        let text = "# HELP ioserve_acme_orders_total Orders.\n\
            # TYPE ioserve_acme_orders_total counter\n\
            ioserve_acme_orders_total{result=\"issued\"} 1\n\
            ioserve_acme_orders_total{result=\"failed\"} 3\n\
            ioserve_tls_certificate_expiry_timestamp_seconds{name=\"a.test\"} 1.795659e9\n\
            ioserve_tls_certificate_expiry_timestamp_seconds{name=\"b\\\"q\",x=\"y\"} 5\n\
            ioserve_up 1\n";
        let issued = [("result", "issued")];
        assert_eq!(
            metric(text, "ioserve_acme_orders_total", &issued),
            Some(1.0)
        );
        assert_eq!(metric(text, "ioserve_acme_orders_total", &[]), Some(4.0));
        let expiry = "ioserve_tls_certificate_expiry_timestamp_seconds";
        assert_eq!(
            metric(text, expiry, &[("name", "a.test")]),
            Some(1_795_659_000.0)
        );
        assert_eq!(metric(text, expiry, &[("name", "b\"q")]), Some(5.0));
        assert_eq!(metric(text, expiry, &[("name", "c.test")]), None);
        assert_eq!(metric(text, "ioserve_up", &[]), Some(1.0));
        assert_eq!(metric(text, "ioserve", &[]), None);
    }
}
