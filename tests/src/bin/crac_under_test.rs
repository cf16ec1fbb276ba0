//! The `crac` command, built in this package so the end-to-end tests can run it
//! (`CARGO_BIN_EXE_crac-under-test`): the same code as `crac-criu`'s `crac` binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    let code = crac_criu::cli::run(
        &args,
        &mut crac_criu::cli::Term {
            out: &mut out,
            err: &mut err,
        },
    );
    ExitCode::from(code as u8)
}
