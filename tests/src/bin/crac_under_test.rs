//! The `crac` command, built in this package so the end-to-end tests can run it
//! (`CARGO_BIN_EXE_crac-under-test`): the same code as `crac-cli`'s `crac` binary.

fn main() -> std::process::ExitCode {
    crac_cli::main()
}
