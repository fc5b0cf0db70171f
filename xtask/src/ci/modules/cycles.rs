//! Module cycles at each level of a crate's tree, counting a folder (a module with its
//! descendants) as one module.
//!
//! Each "uses" edge counts once, at the level where its two ends part: for an edge
//! from `a::x::p` to `a::y::q`, inside `a`, as `x -> y`. A module's own body (its
//! `mod.rs`, or the crate's `lib.rs`) is a node of its level beside its children:
//! `a::x` naming an item of `a`'s body counts inside `a` as `x -> a's body`, and `a`'s
//! body naming `a::x` as `a's body -> x`. So a child may use its parent's items as
//! long as the parent's body does not use that child (directly or around a cycle).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::PathBuf;

use super::tree::{Edge, ModulePath};

/// A node at one level: the level module's own body, or one of its children (with
/// everything below it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Node {
    Body,
    Child(String),
}

/// A cycle among the nodes of `level`: `chain` starts and ends at the same node, and
/// `examples[i]` is one place where `chain[i]` uses `chain[i + 1]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cycle {
    pub(crate) level: ModulePath,
    pub(crate) chain: Vec<Node>,
    pub(crate) examples: Vec<(PathBuf, usize)>,
}

impl Cycle {
    /// The chain as module paths, `crate::a -> crate::b -> crate::a` (a body shows as
    /// `crate::a (body)`).
    pub(crate) fn chain_names(&self) -> Vec<String> {
        self.chain.iter().map(|node| self.name(node)).collect()
    }

    fn name(&self, node: &Node) -> String {
        let mut name = String::from("crate");
        for segment in &self.level {
            name.push_str("::");
            name.push_str(segment);
        }
        match node {
            Node::Body => name.push_str(" (body)"),
            Node::Child(child) => {
                name.push_str("::");
                name.push_str(child);
            }
        }
        name
    }
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.chain_names().join(" -> "))?;
        for (index, (file, line)) in self.examples.iter().enumerate() {
            writeln!(
                f,
                "    {} -> {}: {}:{line}",
                self.name(&self.chain[index]),
                self.name(&self.chain[index + 1]),
                file.display()
            )?;
        }
        Ok(())
    }
}

/// Where an edge counts: its level and its two nodes there; `None` for an edge inside
/// one module.
fn project(edge: &Edge) -> Option<(ModulePath, Node, Node)> {
    let common = edge
        .from
        .iter()
        .zip(&edge.to)
        .take_while(|(a, b)| a == b)
        .count();
    let node = |path: &ModulePath| {
        path.get(common)
            .map_or(Node::Body, |name| Node::Child(name.clone()))
    };
    let (from, to) = (node(&edge.from), node(&edge.to));
    (from != to).then(|| (edge.from[..common].to_vec(), from, to))
}

/// One level's graph: for each edge between two nodes, its first example.
type LevelGraph = BTreeMap<Node, BTreeMap<Node, (PathBuf, usize)>>;

/// The cycles of the crate whose edges are `edges`, in level order: for each strongly
/// connected group of nodes at a level, shortest cycles until each member is on one.
pub(crate) fn find(edges: &[Edge]) -> Vec<Cycle> {
    let mut levels: BTreeMap<ModulePath, LevelGraph> = BTreeMap::new();
    for edge in edges {
        if let Some((level, from, to)) = project(edge) {
            levels
                .entry(level)
                .or_default()
                .entry(from)
                .or_default()
                .entry(to)
                .or_insert_with(|| (edge.file.clone(), edge.line));
        }
    }
    let mut cycles = Vec::new();
    for (level, graph) in levels {
        for group in strongly_connected(&graph) {
            if group.len() < 2 {
                continue;
            }
            // Cycles until every member is on one, each the shortest through the first
            // member not yet on one, so that fixing every printed cycle fixes the group.
            let mut uncovered = group.clone();
            while let Some(start) = uncovered.first().cloned() {
                let chain = shortest_cycle(&graph, &group, &start);
                for node in &chain {
                    uncovered.remove(node);
                }
                let examples = chain
                    .windows(2)
                    .map(|pair| graph[&pair[0]][&pair[1]].clone())
                    .collect();
                cycles.push(Cycle {
                    level: level.clone(),
                    chain,
                    examples,
                });
            }
        }
    }
    cycles
}

/// The strongly connected groups of `graph` (Tarjan's algorithm).
fn strongly_connected(graph: &LevelGraph) -> Vec<BTreeSet<Node>> {
    struct State<'a> {
        graph: &'a LevelGraph,
        next_index: usize,
        index: BTreeMap<&'a Node, usize>,
        low: BTreeMap<&'a Node, usize>,
        stack: Vec<&'a Node>,
        on_stack: BTreeSet<&'a Node>,
        groups: Vec<BTreeSet<Node>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a Node) {
        state.index.insert(node, state.next_index);
        state.low.insert(node, state.next_index);
        state.next_index += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        for next in state.graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if !state.index.contains_key(next) {
                visit(state, next);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut group = BTreeSet::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                group.insert(member.clone());
                if member == node {
                    break;
                }
            }
            state.groups.push(group);
        }
    }
    let mut state = State {
        graph,
        next_index: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.groups.sort();
    state.groups
}

/// The shortest cycle through `start`, a member of `group`, staying inside the group
/// (breadth-first).
fn shortest_cycle(graph: &LevelGraph, group: &BTreeSet<Node>, start: &Node) -> Vec<Node> {
    let mut came_from: BTreeMap<&Node, &Node> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if !group.contains(next) {
                continue;
            }
            if next == start {
                let mut chain = vec![start.clone(), node.clone()];
                let mut at = node;
                while at != start {
                    at = came_from[at];
                    chain.push(at.clone());
                }
                chain.reverse();
                return chain;
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    unreachable!("a strongly connected group of two or more nodes has a cycle through each")
}
