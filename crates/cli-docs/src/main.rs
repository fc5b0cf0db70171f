//! `cli-docs OUT`: writes the man pages and shell completions of ioserve, numa, probe
//! and timeserve under OUT (see the library's docs for the layout).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(out), None) = (args.next(), args.next()) else {
        eprintln!("usage: cli-docs OUT_DIR");
        return ExitCode::from(2);
    };
    let out = PathBuf::from(out);
    match cli_docs::write_all(&out) {
        Ok(files) => {
            println!("cli-docs: {} files under {}", files.len(), out.display());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("cli-docs: cannot write under {}: {error}", out.display());
            ExitCode::FAILURE
        }
    }
}
