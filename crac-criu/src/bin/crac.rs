//! `crac`: restore an image, ask a running process to checkpoint itself, check the machine.
//! See [`crac_criu::cli`] (`crac --help`).

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
