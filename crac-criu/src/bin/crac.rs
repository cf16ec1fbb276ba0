//! `crac`: restore an image, ask a running process to checkpoint itself, check the machine.
//! See [`crac_criu::cli`] (`crac --help`).

fn main() -> std::process::ExitCode {
    crac_criu::cli::main()
}
