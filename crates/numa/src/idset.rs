//! Sets of NUMA node or CPU numbers, in the kernel's two text forms and numactl's
//! grammar.
//!
//! - The list form of sysfs and `/proc/PID/status` `*_list` fields: `0-3,8,10-11`.
//! - The mask form of `Cpus_allowed` / `Mems_allowed`: comma-separated 32-bit hex words,
//!   most significant first: `00000000,0000000f`.
//! - numactl's specification grammar ([`IdSet::parse_spec`]): `N`, `A-B`, commas, `all`,
//!   a leading `!` inverting the whole list, a leading `+` making numbers relative to
//!   the allowed set.

use std::fmt;

/// A set of small non-negative numbers (node or CPU ids), kept as a bitmap.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct IdSet {
    words: Vec<u64>,
}

/// Why a list, mask or specification cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IdSetError {
    /// A token is not a number, a range or a keyword.
    #[error("invalid {what} specification '{input}': bad token '{token}'{valid}")]
    Syntax {
        /// `node` or `cpu`.
        what: &'static str,
        /// The whole input.
        input: String,
        /// The offending token.
        token: String,
        /// `; valid nodes: 0-1`, when known.
        valid: String,
    },
    /// A number names no node (or CPU) that may be used.
    #[error("invalid {what} specification '{input}': {what} {id} is not available{valid}")]
    Unavailable {
        /// `node` or `cpu`.
        what: &'static str,
        /// The whole input.
        input: String,
        /// The unavailable number.
        id: u32,
        /// `; valid nodes: 0-1`.
        valid: String,
    },
    /// A hex mask is malformed.
    #[error("invalid mask '{0}'")]
    Mask(String),
}

/// Largest id accepted (the kernel's NR_CPUS and MAX_NUMNODES stay far below).
const MAX_ID: u32 = 1 << 16;

impl IdSet {
    /// The empty set.
    pub fn new() -> IdSet {
        IdSet::default()
    }

    /// Adds `id`.
    pub fn insert(&mut self, id: u32) {
        let (word, bit) = (id as usize / 64, id % 64);
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << bit;
    }

    /// Removes `id`.
    pub fn remove(&mut self, id: u32) {
        if let Some(word) = self.words.get_mut(id as usize / 64) {
            *word &= !(1 << (id % 64));
        }
    }

    /// Whether `id` is in the set.
    pub fn contains(&self, id: u32) -> bool {
        self.words
            .get(id as usize / 64)
            .is_some_and(|word| word & (1 << (id % 64)) != 0)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &word)| {
            (0..64)
                .filter(move |bit| word & (1 << bit) != 0)
                .map(move |bit| i as u32 * 64 + bit)
        })
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// The largest member.
    pub fn max(&self) -> Option<u32> {
        self.iter().last()
    }

    /// Members of both sets.
    pub fn intersection(&self, other: &IdSet) -> IdSet {
        self.iter().filter(|&id| other.contains(id)).collect()
    }

    /// Parses the kernel's list form (`0-3,8`); empty text is the empty set.
    pub fn parse_list(text: &str) -> Result<IdSet, IdSetError> {
        let text = text.trim();
        let mut set = IdSet::new();
        if text.is_empty() {
            return Ok(set);
        }
        for token in text.split(',') {
            let (first, last) = parse_range(token.trim()).ok_or_else(|| IdSetError::Syntax {
                what: "list",
                input: text.to_string(),
                token: token.to_string(),
                valid: String::new(),
            })?;
            (first..=last).for_each(|id| set.insert(id));
        }
        Ok(set)
    }

    /// Parses the mask form (`00000000,0000000f`).
    pub fn parse_mask(text: &str) -> Result<IdSet, IdSetError> {
        let text = text.trim();
        let mut set = IdSet::new();
        for (i, word) in text.rsplit(',').enumerate() {
            let bits =
                u32::from_str_radix(word, 16).map_err(|_| IdSetError::Mask(text.to_string()))?;
            for bit in 0..32 {
                if bits & (1 << bit) != 0 {
                    set.insert(i as u32 * 32 + bit);
                }
            }
        }
        Ok(set)
    }

    /// Parses numactl's specification grammar for `what` (`"node"` or `"cpu"`).
    ///
    /// `allowed` is what this process may use (Mems_allowed or the CPU affinity): `all`
    /// means it, `+` numbers index into it, and every resulting id must be in it.
    /// `present` is every id of the machine: `!` inverts against it.
    ///
    /// ```
    /// use ioserve_numa::IdSet;
    /// let allowed = IdSet::parse_list("0-3").unwrap();
    /// let spec = |s| IdSet::parse_spec(s, "node", &allowed, &allowed).map(|n| n.to_string());
    /// assert_eq!(spec("1,3").unwrap(), "1,3");
    /// assert_eq!(spec("!1-2").unwrap(), "0,3");
    /// assert_eq!(spec("+1-2").unwrap(), "1-2");
    /// assert_eq!(spec("all").unwrap(), "0-3");
    /// assert!(spec("7").unwrap_err().to_string().contains("valid nodes: 0-3"));
    /// ```
    pub fn parse_spec(
        input: &str,
        what: &'static str,
        allowed: &IdSet,
        present: &IdSet,
    ) -> Result<IdSet, IdSetError> {
        let valid = format!("; valid {what}s: {allowed}");
        let syntax = |token: &str| IdSetError::Syntax {
            what,
            input: input.to_string(),
            token: token.to_string(),
            valid: valid.clone(),
        };
        let mut text = input.trim();
        let invert = text.starts_with('!');
        if invert {
            text = &text[1..];
        }
        let relative = text.starts_with('+');
        if relative {
            text = &text[1..];
        }
        let mut set = IdSet::new();
        if text == "all" {
            set = allowed.clone();
        } else {
            if text.is_empty() {
                return Err(syntax(input));
            }
            let allowed_ids: Vec<u32> = allowed.iter().collect();
            for token in text.split(',') {
                let (first, last) = parse_range(token.trim()).ok_or_else(|| syntax(token))?;
                for n in first..=last {
                    let id = if relative {
                        *allowed_ids
                            .get(n as usize)
                            .ok_or_else(|| IdSetError::Unavailable {
                                what,
                                input: input.to_string(),
                                id: n,
                                valid: format!("; {} {what}s are allowed", allowed_ids.len()),
                            })?
                    } else {
                        n
                    };
                    set.insert(id);
                }
            }
        }
        if invert {
            set = present.iter().filter(|&id| !set.contains(id)).collect();
        }
        if let Some(id) = set.iter().find(|&id| !allowed.contains(id)) {
            return Err(IdSetError::Unavailable {
                what,
                input: input.to_string(),
                id,
                valid,
            });
        }
        Ok(set)
    }
}

/// `N` or `A-B` with A <= B, both at most [`MAX_ID`].
fn parse_range(token: &str) -> Option<(u32, u32)> {
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
            .filter(|&n| n <= MAX_ID)
    };
    match token.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (number(a)?, number(b)?);
            (a <= b).then_some((a, b))
        }
        None => number(token).map(|n| (n, n)),
    }
}

impl FromIterator<u32> for IdSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> IdSet {
        let mut set = IdSet::new();
        iter.into_iter().for_each(|id| set.insert(id));
        set
    }
}

/// The list form: `0-3,8`.
impl fmt::Display for IdSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids = self.iter().peekable();
        let mut first = true;
        while let Some(start) = ids.next() {
            let mut end = start;
            while ids.peek() == Some(&(end + 1)) {
                end = ids.next().unwrap_or(end);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for IdSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdSet({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> IdSet {
        IdSet::parse_list(text).unwrap()
    }

    #[test]
    fn list_form_round_trips() {
        for text in ["", "0", "0-3", "0-3,8,10-11", "1,3,5", "63-65,128"] {
            assert_eq!(list(text).to_string(), text);
        }
        assert_eq!(list(" 2,0-1 \n").to_string(), "0-2");
        assert_eq!(list("0-3,8").len(), 5);
        assert!(IdSet::parse_list("3-1").is_err());
        assert!(IdSet::parse_list("a").is_err());
        assert!(IdSet::parse_list("1,,2").is_err());
    }

    #[test]
    fn mask_form() {
        assert_eq!(IdSet::parse_mask("f").unwrap().to_string(), "0-3");
        assert_eq!(
            IdSet::parse_mask("00000001,00000005").unwrap().to_string(),
            "0,2,32"
        );
        assert!(IdSet::parse_mask("xyz").is_err());
    }

    #[test]
    fn numactl_grammar() {
        let allowed = list("0-1,3");
        let present = list("0-3");
        let spec = |s: &str| IdSet::parse_spec(s, "node", &allowed, &present);
        assert_eq!(spec("0,3").unwrap().to_string(), "0,3");
        assert_eq!(spec("all").unwrap(), allowed);
        assert_eq!(spec("+2").unwrap().to_string(), "3");
        assert_eq!(spec("!2-3").unwrap().to_string(), "0-1");
        let err = spec("2").unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid node specification '2': node 2 is not available; valid nodes: 0-1,3"
        );
        let err = spec("x").unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid node specification 'x': bad token 'x'; valid nodes: 0-1,3"
        );
        assert!(spec("").is_err());
        assert!(spec("+5")
            .unwrap_err()
            .to_string()
            .contains("3 nodes are allowed"));
        // `!` inverts against every present node: here that leaves node 2, not allowed.
        assert!(matches!(
            spec("!all"),
            Err(IdSetError::Unavailable { id: 2, .. })
        ));
    }
}
