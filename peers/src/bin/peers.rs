//! `peers [--json FILE]`: every adapter through every law; prints the conformance table
//! (markdown, as in the README) and exits 0 once it ran: a failing row is a finding about the
//! peer, not a failure of the run.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

// The optimizer suite's memory law counts this binary's allocations.
harness::install_counting_allocator!();

/// Run the harness's laws on Rust crates written elsewhere.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Also write the rows as JSON (`{"results": [{"crate", "version", "subject", "law", "verdict", "evidence"}]}`).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let rows = peers::run(&peers::RunOptions::default());
    print!("{}", peers::markdown_table(&rows));
    if let Some(path) = args.json {
        let text = match serde_json::to_string_pretty(&serde_json::json!({ "results": rows })) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("peers: {e}");
                return ExitCode::from(2);
            }
        };
        if let Err(e) = std::fs::write(&path, text + "\n") {
            eprintln!("peers: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}
