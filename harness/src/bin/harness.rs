//! The `harness` command: [`harness::cli::run`] with the counting allocator installed, so that
//! memory laws and peaks are measured (contract: `docs/CLI.md`).

harness::install_counting_allocator!();

fn main() -> std::process::ExitCode {
    harness::cli::run(std::env::args_os())
}
