//! `crac`: restore an image, ask a running process to checkpoint itself, check the machine.
//! See [`crac_cli::cli`] (`crac --help`).

fn main() -> std::process::ExitCode {
    crac_cli::main()
}
