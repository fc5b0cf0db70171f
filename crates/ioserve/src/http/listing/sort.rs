//! The order of a listing, from the query as Caddy spells it: `sort=name|size|time`
//! and `order=asc|desc`. Directories come first in every order; among themselves they
//! have no size to sort by, so a size order lists them by name.
//!
//! Names compare as file managers compare them ([`natural`]): without case, and with
//! runs of digits by their value, so `a.txt` comes before `Zeta notes.txt` and `file2`
//! before `file10`; names that differ only there are ordered byte-wise, so the order
//! is total and the same on every request.
//!
//! An unknown value is refused (400) with a message naming the parameter and the
//! values it allows, where Caddy ignores it: a link with a typo then says so instead
//! of showing an order that was not asked for. Other query parameters are not ours
//! and are left alone.

use std::cmp::Ordering;
use std::fmt;

use percent_encoding::percent_decode_str;

/// What a listing is sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortKey {
    /// The name, in natural order without case ([`natural`]).
    #[default]
    Name,
    /// The size in bytes (directories: by name).
    Size,
    /// The modification time.
    Time,
}

impl SortKey {
    /// Every key, in the order the columns show them.
    pub const ALL: [SortKey; 3] = [SortKey::Name, SortKey::Size, SortKey::Time];

    /// The key as the query spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SortKey::Name => "name",
            SortKey::Size => "size",
            SortKey::Time => "time",
        }
    }
}

/// The direction of a listing's order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Direction {
    /// Smallest, oldest or first name first.
    #[default]
    Ascending,
    /// Largest, newest or last name first.
    Descending,
}

impl Direction {
    /// The direction as the query spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Ascending => "asc",
            Direction::Descending => "desc",
        }
    }

    /// The other direction.
    pub fn reversed(self) -> Direction {
        match self {
            Direction::Ascending => Direction::Descending,
            Direction::Descending => Direction::Ascending,
        }
    }
}

/// A listing's order: name ascending unless the query says otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sort {
    /// What it is sorted by.
    pub key: SortKey,
    /// In which direction.
    pub direction: Direction,
}

/// A `sort` or `order` query value that is not one of the allowed ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SortError {
    /// `sort=` something else.
    #[error("the query parameter sort must be name, size or time")]
    Key,
    /// `order=` something else.
    #[error("the query parameter order must be asc or desc")]
    Direction,
}

/// The fields of one entry that an order compares.
pub(crate) struct SortFields<'a> {
    /// Directories come first.
    pub is_dir: bool,
    /// The name's bytes.
    pub name: &'a [u8],
    /// Bytes.
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub modified: i64,
}

impl Sort {
    /// The order asked for by the query of `target` (the part after `?`, before `#`);
    /// the last `sort` and the last `order` count.
    pub fn from_target(target: &str) -> Result<Sort, SortError> {
        let before_fragment = target.split('#').next().unwrap_or_default();
        let Some((_, query)) = before_fragment.split_once('?') else {
            return Ok(Sort::default());
        };
        let mut sort = Sort::default();
        for pair in query.split('&') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode_str(value).collect::<Vec<u8>>();
            match name {
                "sort" => {
                    sort.key = match value.as_slice() {
                        b"name" => SortKey::Name,
                        b"size" => SortKey::Size,
                        b"time" => SortKey::Time,
                        _ => return Err(SortError::Key),
                    }
                }
                "order" => {
                    sort.direction = match value.as_slice() {
                        b"asc" => Direction::Ascending,
                        b"desc" => Direction::Descending,
                        _ => return Err(SortError::Direction),
                    }
                }
                _ => {}
            }
        }
        Ok(sort)
    }

    /// Whether the order needs each entry's `stat` (size, time), not only its name.
    pub fn needs_stat(self) -> bool {
        self.key != SortKey::Name
    }

    /// Compares two entries: directories first, then by the key (ties by name), in
    /// the direction.
    pub(crate) fn compare(self, a: &SortFields<'_>, b: &SortFields<'_>) -> Ordering {
        let by_key = match self.key {
            SortKey::Name => Ordering::Equal,
            // Directories have no size to compare: they keep to their names.
            SortKey::Size if a.is_dir && b.is_dir => Ordering::Equal,
            SortKey::Size => a.size.cmp(&b.size),
            SortKey::Time => a.modified.cmp(&b.modified),
        };
        let within = by_key.then_with(|| natural(a.name, b.name));
        let within = match self.direction {
            Direction::Ascending => within,
            Direction::Descending => within.reverse(),
        };
        b.is_dir.cmp(&a.is_dir).then(within)
    }

    /// The query of the link on `key`'s column header: the other direction where
    /// `key` is the current order, ascending otherwise.
    pub fn toggled(self, key: SortKey) -> Sort {
        let direction = if key == self.key {
            self.direction.reversed()
        } else {
            Direction::Ascending
        };
        Sort { key, direction }
    }
}

/// Compares two names as people read them: runs of ASCII digits by their value (`2` <
/// `10`, `02` = `2`), everything else character by
/// character without case (Unicode's lowercase of each character of valid UTF-8, ASCII
/// case alone in bytes that are not). Names equal that way compare byte-wise, so two
/// different names are never equal.
///
/// Hand-written rather than a crate's: names are bytes (a directory may hold names
/// that are not UTF-8), and the natural-order crates compare `str`.
pub fn natural(a: &[u8], b: &[u8]) -> Ordering {
    natural_without_tie_break(a, b).then_with(|| a.cmp(b))
}

fn natural_without_tie_break(mut a: &[u8], mut b: &[u8]) -> Ordering {
    loop {
        match (a.first(), b.first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (run_a, rest_a) = split_digits(a);
                let (run_b, rest_b) = split_digits(b);
                let order = compare_numbers(run_a, run_b);
                if order != Ordering::Equal {
                    return order;
                }
                (a, b) = (rest_a, rest_b);
            }
            (Some(_), Some(_)) => {
                let (char_a, rest_a) = next_char(a);
                let (char_b, rest_b) = next_char(b);
                let order = char_a.cmp(&char_b);
                if order != Ordering::Equal {
                    return order;
                }
                (a, b) = (rest_a, rest_b);
            }
        }
    }
}

/// The leading run of ASCII digits of `name` and what follows it.
fn split_digits(name: &[u8]) -> (&[u8], &[u8]) {
    let end = name
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(name.len());
    name.split_at(end)
}

/// Two runs of digits by value, however long.
fn compare_numbers(a: &[u8], b: &[u8]) -> Ordering {
    fn significant(run: &[u8]) -> &[u8] {
        let zeros = run.iter().take_while(|&&d| d == b'0').count();
        &run[zeros..]
    }
    let (a, b) = (significant(a), significant(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// A character of `name` folded to lowercase (as a `char`, or a byte that does not
/// start valid UTF-8 mapped past every `char`), and the bytes after it.
fn next_char(name: &[u8]) -> (u32, &[u8]) {
    let width = match name[0] {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 0,
    };
    let decoded = name
        .get(..width)
        .and_then(|bytes| std::str::from_utf8(bytes).ok())
        .and_then(|text| text.chars().next());
    match decoded {
        // The first character of the lowercase mapping (one for all but a few).
        Some(c) => (c.to_lowercase().next().unwrap_or(c) as u32, &name[width..]),
        None => (
            u32::from(char::MAX) + 1 + u32::from(name[0].to_ascii_lowercase()),
            &name[1..],
        ),
    }
}

impl fmt::Display for Sort {
    /// The query that asks for this order, without the `?`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sort={}&order={}",
            self.key.as_str(),
            self.direction.as_str()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_the_order() {
        let sort = |key, direction| Sort { key, direction };
        for (target, expected) in [
            ("/d/", Ok(Sort::default())),
            ("/d/?", Ok(Sort::default())),
            ("/d/?download=tar", Ok(Sort::default())),
            (
                "/d/?sort=size",
                Ok(sort(SortKey::Size, Direction::Ascending)),
            ),
            (
                "/d/?sort=time&order=desc",
                Ok(sort(SortKey::Time, Direction::Descending)),
            ),
            (
                "/d/?order=desc",
                Ok(sort(SortKey::Name, Direction::Descending)),
            ),
            (
                "/d/?sort=name&x=1&sort=%73ize",
                Ok(sort(SortKey::Size, Direction::Ascending)),
            ),
            ("/d/#?sort=bogus", Ok(Sort::default())),
            ("/d/?sort=bogus", Err(SortError::Key)),
            ("/d/?sort=", Err(SortError::Key)),
            ("/d/?sort", Err(SortError::Key)),
            ("/d/?sort=SIZE", Err(SortError::Key)),
            ("/d/?order=up", Err(SortError::Direction)),
            ("/d/?sort=size&order=", Err(SortError::Direction)),
        ] {
            assert_eq!(Sort::from_target(target), expected, "{target}");
        }
        assert_eq!(
            SortError::Key.to_string(),
            "the query parameter sort must be name, size or time"
        );
        assert_eq!(
            SortError::Direction.to_string(),
            "the query parameter order must be asc or desc"
        );
    }

    fn sorted(sort: Sort) -> Vec<&'static str> {
        let entries = [
            (true, "b-dir", 4096, 5),
            (false, "small", 10, 30),
            (false, "big", 5000, 10),
            (true, "a-dir", 60, 40),
            (false, "also-small", 10, 20),
        ];
        let mut entries: Vec<SortFields<'static>> = entries
            .iter()
            .map(|&(is_dir, name, size, modified)| SortFields {
                is_dir,
                name: name.as_bytes(),
                size,
                modified,
            })
            .collect();
        entries.sort_by(|a, b| sort.compare(a, b));
        entries
            .iter()
            .map(|e| std::str::from_utf8(e.name).unwrap())
            .collect()
    }

    #[test]
    fn directories_come_first_in_every_order() {
        let sort = |key, direction| Sort { key, direction };
        use Direction::*;
        use SortKey::*;
        assert_eq!(
            sorted(Sort::default()),
            ["a-dir", "b-dir", "also-small", "big", "small"]
        );
        assert_eq!(
            sorted(sort(Name, Descending)),
            ["b-dir", "a-dir", "small", "big", "also-small"]
        );
        assert_eq!(
            sorted(sort(Size, Ascending)),
            ["a-dir", "b-dir", "also-small", "small", "big"]
        );
        assert_eq!(
            sorted(sort(Size, Descending)),
            ["b-dir", "a-dir", "big", "small", "also-small"]
        );
        assert_eq!(
            sorted(sort(Time, Ascending)),
            ["b-dir", "a-dir", "big", "also-small", "small"]
        );
        assert_eq!(
            sorted(sort(Time, Descending)),
            ["a-dir", "b-dir", "small", "also-small", "big"]
        );
    }

    #[test]
    fn names_sort_without_case_and_digit_runs_by_value() {
        let mut names: Vec<&[u8]> = vec![
            b"Zeta notes.txt",
            b"file10",
            b"a.txt",
            b"file2",
            b"File1",
            b"file02",
            b"B.txt",
            b"file2b",
            b"\xc3\x89t\xc3\xa9.txt", // Été.txt
            b"\xc3\xa9t\xc3\xa9.txt", // été.txt
            b"\xff raw",
            b"file",
            b"10",
            b"9",
        ];
        names.sort_by(|a, b| natural(a, b));
        let shown: Vec<String> = names
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect();
        assert_eq!(
            shown,
            [
                "9",
                "10",
                "a.txt",
                "B.txt",
                "file",
                "File1",
                "file02",
                "file2",
                "file2b",
                "file10",
                "Zeta notes.txt",
                "\u{c9}t\u{e9}.txt",
                "\u{e9}t\u{e9}.txt",
                "\u{fffd} raw",
            ]
        );
    }

    #[test]
    fn the_name_order_is_total_and_consistent() {
        let names: [&[u8]; 9] = [
            b"a", b"A", b"a1", b"a01", b"a001", b"A1", b"\xff", b"\xfe", b"a\xffb",
        ];
        for x in names {
            assert_eq!(natural(x, x), Ordering::Equal);
            for y in names {
                assert_eq!(natural(x, y), natural(y, x).reverse(), "{x:?} {y:?}");
                if x != y {
                    assert_ne!(natural(x, y), Ordering::Equal, "{x:?} {y:?}");
                }
                for z in names {
                    if natural(x, y).is_lt() && natural(y, z).is_lt() {
                        assert!(natural(x, z).is_lt(), "{x:?} {y:?} {z:?}");
                    }
                }
            }
        }
        // Very long digit runs compare without overflow.
        let long_a = [b'9'; 64];
        let mut long_b = [b'0'; 65];
        long_b[0] = b'1';
        assert_eq!(natural(&long_a, &long_b), Ordering::Less);
    }

    #[test]
    fn a_header_link_toggles_its_own_column_only() {
        let current = Sort {
            key: SortKey::Size,
            direction: Direction::Ascending,
        };
        assert_eq!(
            current.toggled(SortKey::Size).to_string(),
            "sort=size&order=desc"
        );
        assert_eq!(
            current.toggled(SortKey::Size).toggled(SortKey::Size),
            current
        );
        assert_eq!(
            current.toggled(SortKey::Name).to_string(),
            "sort=name&order=asc"
        );
        assert_eq!(
            Sort::default().toggled(SortKey::Name).to_string(),
            "sort=name&order=desc"
        );
    }
}
