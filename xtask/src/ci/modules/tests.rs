//! Tiny crates in memory: which cycles the check finds, with their chains and lines.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use super::crate_cycles;
use super::cycles::Cycle;

/// The cycles of the crate made of `files` (`src/lib.rs` is its root).
fn cycles_of(files: &[(&str, &str)]) -> Vec<Cycle> {
    let sources: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(path, text)| (PathBuf::from(path), text.to_string()))
        .collect();
    let read = |path: &Path| {
        sources
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    };
    crate_cycles(Path::new("src/lib.rs"), &read).expect("the fixture parses")
}

/// Each cycle as its chain of names.
fn chains(cycles: &[Cycle]) -> Vec<Vec<String>> {
    cycles.iter().map(Cycle::chain_names).collect()
}

/// Each cycle's examples as `file:line`.
fn examples(cycle: &Cycle) -> Vec<String> {
    cycle
        .examples
        .iter()
        .map(|(file, line)| format!("{}:{line}", file.display()))
        .collect()
}

#[test]
fn a_dag_passes() {
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\npub use a::Thing;\n"),
        ("src/a.rs", "use crate::b::helper;\npub struct Thing;\n"),
        (
            "src/b.rs",
            "pub fn helper() { crate::c::leaf(); super::c::leaf() }\n",
        ),
        ("src/c.rs", "pub fn leaf() {}\n"),
    ]);
    assert_eq!(chains(&cycles), Vec::<Vec<String>>::new());
}

#[test]
fn a_direct_cycle_is_found() {
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::B;\npub struct A;\n"),
        (
            "src/b.rs",
            "pub struct B;\n\nfn f() -> crate::a::A { crate::a::A }\n",
        ),
    ]);
    assert_eq!(
        chains(&cycles),
        [["crate::a", "crate::b", "crate::a"]],
        "{cycles:?}"
    );
    assert_eq!(examples(&cycles[0]), ["src/a.rs:1", "src/b.rs:3"]);
}

#[test]
fn a_cycle_through_a_folder_counts_the_folder_as_one_module() {
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a/mod.rs", "mod x;\npub struct A;\n"),
        ("src/a/x.rs", "\nfn f() { crate::b::g() }\n"),
        ("src/b.rs", "pub fn g() {}\nuse crate::a::A;\n"),
    ]);
    assert_eq!(chains(&cycles), [["crate::a", "crate::b", "crate::a"]]);
    assert_eq!(examples(&cycles[0]), ["src/a/x.rs:2", "src/b.rs:2"]);
}

#[test]
fn a_glob_import_cycle_is_found() {
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        ("src/a.rs", "use crate::b::*;\npub struct A;\n"),
        ("src/b.rs", "use super::a::{self, *};\npub struct B;\n"),
    ]);
    assert_eq!(chains(&cycles), [["crate::a", "crate::b", "crate::a"]]);
    assert_eq!(examples(&cycles[0]), ["src/a.rs:1", "src/b.rs:1"]);
}

#[test]
fn a_name_from_a_glob_leads_to_its_module() {
    // c uses crate::Thing, which lib.rs re-exports from a by a glob: a use of a, and
    // no cycle with the crate root's body (which uses c).
    let cycles = cycles_of(&[
        (
            "src/lib.rs",
            "mod a;\nmod c;\npub use a::*;\npub use c::run;\n",
        ),
        ("src/a.rs", "pub struct Thing;\n"),
        ("src/c.rs", "pub fn run(_: crate::Thing) {}\n"),
    ]);
    assert_eq!(chains(&cycles), Vec::<Vec<String>>::new());
}

#[test]
fn a_super_cycle_is_found() {
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod outer;\n"),
        ("src/outer/mod.rs", "mod x;\nmod y;\n"),
        ("src/outer/x.rs", "pub fn f() {\n    super::y::g();\n}\n"),
        ("src/outer/y.rs", "pub fn g() {\n    super::x::f();\n}\n"),
    ]);
    assert_eq!(
        chains(&cycles),
        [["crate::outer::x", "crate::outer::y", "crate::outer::x"]]
    );
    assert_eq!(
        examples(&cycles[0]),
        ["src/outer/x.rs:2", "src/outer/y.rs:2"]
    );
}

#[test]
fn a_child_and_its_mod_rs_body_using_each_other_is_a_cycle() {
    let cycles = cycles_of(&[
        ("src/lib.rs", "pub mod strategy;\n"),
        (
            "src/strategy/mod.rs",
            "mod cold;\npub trait Strategy {}\npub use cold::Cold;\n",
        ),
        (
            "src/strategy/cold.rs",
            "use super::Strategy;\npub struct Cold;\n",
        ),
    ]);
    assert_eq!(
        chains(&cycles),
        [[
            "crate::strategy (body)",
            "crate::strategy::cold",
            "crate::strategy (body)"
        ]]
    );
    assert_eq!(
        examples(&cycles[0]),
        ["src/strategy/mod.rs:3", "src/strategy/cold.rs:1"]
    );
}

#[test]
fn a_child_may_use_its_parent_when_the_parent_does_not_use_it() {
    let cycles = cycles_of(&[
        ("src/lib.rs", "pub mod strategy;\n"),
        ("src/strategy/mod.rs", "mod cold;\npub trait Strategy {}\n"),
        (
            "src/strategy/cold.rs",
            "use super::Strategy;\npub struct Cold;\nimpl Strategy for Cold {}\n",
        ),
    ]);
    assert_eq!(chains(&cycles), Vec::<Vec<String>>::new());
}

#[test]
fn test_modules_inline_modules_and_macro_arguments_count() {
    // An inline test module inside a uses b, through a macro's arguments; b uses a.
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() {\n        \
             assert_eq!(crate::b::g(), 1);\n    }\n}\n",
        ),
        ("src/b.rs", "pub fn g() -> u8 { super::a::f(); 1 }\n"),
    ]);
    assert_eq!(chains(&cycles), [["crate::a", "crate::b", "crate::a"]]);
    assert_eq!(examples(&cycles[0]), ["src/a.rs:6", "src/b.rs:1"]);
}

#[test]
fn a_non_mod_rs_parent_finds_its_children_in_its_folder() {
    // cli.rs with cli/calibrate.rs; calibrate uses report, report uses cli's body.
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod cli;\nmod report;\n"),
        ("src/cli.rs", "mod calibrate;\npub struct Args;\n"),
        ("src/cli/calibrate.rs", "use crate::report::Table;\n"),
        ("src/report.rs", "pub struct Table(crate::cli::Args);\n"),
    ]);
    assert_eq!(
        chains(&cycles),
        [["crate::cli", "crate::report", "crate::cli"]]
    );
    assert_eq!(
        examples(&cycles[0]),
        ["src/cli/calibrate.rs:1", "src/report.rs:1"]
    );
}

#[test]
fn local_names_and_other_crates_are_not_modules() {
    // A variable named like a module, std paths and an enum's variants: no edges.
    let cycles = cycles_of(&[
        ("src/lib.rs", "mod a;\nmod b;\n"),
        (
            "src/a.rs",
            "pub enum Kind { One }\npub fn f(b: u8) -> u8 { let _ = Kind::One; \
             std::cmp::max(b, 1) }\n",
        ),
        ("src/b.rs", "use crate::a::f;\npub fn g() -> u8 { f(1) }\n"),
    ]);
    assert_eq!(chains(&cycles), Vec::<Vec<String>>::new());
}

#[test]
fn a_missing_module_file_and_unparsable_source_are_named() {
    let read = |path: &Path| match path.to_str() {
        Some("src/lib.rs") => Ok("mod gone;\n".to_string()),
        _ => Err(io::Error::from(io::ErrorKind::NotFound)),
    };
    let error = crate_cycles(Path::new("src/lib.rs"), &read).unwrap_err();
    assert_eq!(
        format!("{error:#}"),
        "src/lib.rs:1: `mod gone;` but neither src/gone.rs nor src/gone/mod.rs exists"
    );
    let read = |_: &Path| Ok("fn broken( {}\n".to_string());
    let error = crate_cycles(Path::new("src/lib.rs"), &read).unwrap_err();
    let message = format!("{error:#}");
    assert!(
        message.starts_with("src/lib.rs:1:") && message.contains("cannot parse as Rust"),
        "{message}"
    );
}

#[test]
fn every_module_of_a_cyclic_group_is_on_a_printed_cycle() {
    // The body dispatches to both kernels and both use a helper of the body: two cycles.
    let cycles = cycles_of(&[
        ("src/lib.rs", "pub mod kernel;\n"),
        (
            "src/kernel/mod.rs",
            "mod neon;\nmod sse;\nfn fold() {}\npub fn run() { neon::go(); sse::go() }\n",
        ),
        ("src/kernel/neon.rs", "pub fn go() { super::fold() }\n"),
        (
            "src/kernel/sse.rs",
            "use super::fold;\npub fn go() { fold() }\n",
        ),
    ]);
    assert_eq!(
        chains(&cycles),
        [
            [
                "crate::kernel (body)",
                "crate::kernel::neon",
                "crate::kernel (body)"
            ],
            [
                "crate::kernel::sse",
                "crate::kernel (body)",
                "crate::kernel::sse"
            ]
        ]
    );
    assert_eq!(
        examples(&cycles[1]),
        ["src/kernel/sse.rs:1", "src/kernel/mod.rs:4"]
    );
}

#[test]
fn path_attributes_and_files_below_inline_modules_are_followed() {
    // `#[path]` outside inline modules is relative to the file's folder; `mod y;` inside
    // an inline `mod x { }` of lib.rs is src/x/y.rs.
    let cycles = cycles_of(&[
        (
            "src/lib.rs",
            "#[path = \"kernels/arm.rs\"]\nmod arm;\nmod x {\n    mod y;\n}\n",
        ),
        ("src/kernels/arm.rs", "pub fn go() { crate::x::helper() }\n"),
        ("src/x/y.rs", "fn f() { crate::arm::go() }\n"),
    ]);
    assert_eq!(chains(&cycles), [["crate::arm", "crate::x", "crate::arm"]]);
    assert_eq!(
        examples(&cycles[0]),
        ["src/kernels/arm.rs:1", "src/x/y.rs:1"]
    );
}
