//! `/proc/PID/numa_maps`: where a process's pages are, per mapping and node. The one
//! parser of the toolkit (numastat's process tables and [`numastat::process`] use it;
//! it needs no feature, so a service that embeds the library can read its own).
//!
//! Each line is a mapping: its address, its policy, then words such as `heap`,
//! `anon=512`, `N0=256` (pages on node 0) and `kernelpagesize_kB=4`.
//!
//! [`numastat::process`]: crate::numastat::process

use crate::c_number::atoi;

/// What a mapping holds, in numastat's categories and order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryKind {
    /// Hugetlb pages (a `huge` word).
    Huge,
    /// The heap (a `heap` word).
    Heap,
    /// The main thread's stack (a `stack` word).
    Stack,
    /// Everything else.
    Private,
}

impl MemoryKind {
    /// Every kind, in numastat's row order.
    pub const ALL: [MemoryKind; 4] = [
        MemoryKind::Huge,
        MemoryKind::Heap,
        MemoryKind::Stack,
        MemoryKind::Private,
    ];

    /// The row label numastat prints (`Huge`, `Heap`, `Stack`, `Private`).
    pub fn label(self) -> &'static str {
        match self {
            MemoryKind::Huge => "Huge",
            MemoryKind::Heap => "Heap",
            MemoryKind::Stack => "Stack",
            MemoryKind::Private => "Private",
        }
    }

    /// The position in [`MemoryKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The kind a word marks, as numastat decides: a word that starts with `huge`,
    /// `heap` or `stack`.
    fn of_word(word: &str) -> Option<MemoryKind> {
        [MemoryKind::Huge, MemoryKind::Heap, MemoryKind::Stack]
            .into_iter()
            .find(|kind| word.starts_with(&kind.label().to_ascii_lowercase()))
    }
}

/// The pages one mapping has on one node (an `N<node>=<pages>` word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodePages {
    /// What the mapping holds: the first word of its line before this one that names
    /// a kind (as numastat reads it: the kernel writes those words first), else
    /// [`MemoryKind::Private`].
    pub kind: MemoryKind,
    /// The node.
    pub node: u32,
    /// The page count (as C's `atoi` reads it, negative as 0).
    pub pages: u64,
    /// The mapping's page size in KiB (`kernelpagesize_kB=`), when the line gives it.
    pub page_kib: Option<u64>,
}

/// A word that starts with `N` but is no `N<node>=<pages>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: node value parse error in {word:?} (expected N<node>=<pages>)")]
pub struct NumaMapsError {
    /// The line, from 1.
    pub line: usize,
    /// The word.
    pub word: String,
}

/// Every node count of a `numa_maps` text, in the order of the lines and words.
pub fn parse(text: &str) -> Result<Vec<NodePages>, NumaMapsError> {
    let mut counts = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let first = counts.len();
        let mut kind = None;
        let mut page_kib = None;
        for word in line.split([' ', '\t', '\r']).filter(|w| !w.is_empty()) {
            kind = kind.or_else(|| MemoryKind::of_word(word));
            if let Some(size) = word.strip_prefix("kernelpagesize_kB=") {
                page_kib = size.parse().ok();
                continue;
            }
            let Some(rest) = word.strip_prefix('N') else {
                continue;
            };
            let parsed = rest
                .split_once('=')
                .and_then(|(node, pages)| Some((node.parse().ok()?, atoi(pages).max(0) as u64)));
            let Some((node, pages)) = parsed else {
                return Err(NumaMapsError {
                    line: index + 1,
                    word: word.to_string(),
                });
            };
            counts.push(NodePages {
                kind: kind.unwrap_or(MemoryKind::Private),
                node,
                pages,
                page_kib: None,
            });
        }
        // The page size comes after the node words.
        for count in &mut counts[first..] {
            count.page_kib = page_kib;
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_nodes_pages_and_page_sizes() {
        let counts = parse(
            "00400000 default file=/bin/x mapped=2 N0=2 kernelpagesize_kB=4\n\
             01000000 default heap anon=512 dirty=512 N0=256 N1=256 kernelpagesize_kB=4\n\
             7ff00000 default stack anon=3 dirty=3 N1=3\n\
             7fe00000 bind:1 huge anon=1 N1=1 kernelpagesize_kB=2048\n",
        )
        .unwrap();
        let count = |kind, node, pages, page_kib| NodePages {
            kind,
            node,
            pages,
            page_kib,
        };
        assert_eq!(
            counts,
            vec![
                count(MemoryKind::Private, 0, 2, Some(4)),
                count(MemoryKind::Heap, 0, 256, Some(4)),
                count(MemoryKind::Heap, 1, 256, Some(4)),
                count(MemoryKind::Stack, 1, 3, None),
                count(MemoryKind::Huge, 1, 1, Some(2048)),
            ]
        );
    }

    #[test]
    fn a_malformed_node_word_is_an_error_naming_it() {
        let error = parse("7f00 default N0=1\n7e00 N0x1\n").unwrap_err();
        assert_eq!(
            error,
            NumaMapsError {
                line: 2,
                word: "N0x1".into()
            }
        );
        assert!(error.to_string().contains("\"N0x1\""), "{error}");
        // C's atoi: trailing junk after the digits is ignored, a sign kept.
        assert_eq!(parse("7f00 N3=12kb N1=-4\n").unwrap()[0].pages, 12);
        assert_eq!(parse("7f00 N1=-4\n").unwrap()[0].pages, 0);
    }

    #[test]
    fn the_first_word_that_names_a_kind_wins() {
        let counts = parse("7f00 default stack heap N0=1\n").unwrap();
        assert_eq!(counts[0].kind, MemoryKind::Stack);
    }
}
