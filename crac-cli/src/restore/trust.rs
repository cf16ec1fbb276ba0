//! The trust check of an image, in one place: what `crac restore` verifies before CRIU reads
//! a byte of it. The directory is opened through descriptors (a symlink on its path followed
//! only if root or the restoring user owns it, nothing in it followed); the seal
//! is complete; the directory and every file belong to this user and nobody else can write
//! them; every file matches the manifest's digest (page files optionally while the process
//! runs: [`Scope::ExceptPages`]); the image is complete; the CPU has every feature the image's
//! process may use; the executable is the build the image was taken of.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::sys;
use crac_criu::image::manifest::{self, Deferred, Scope};
use crac_criu::image::metadata::Metadata;
use crac_criu::image::{DUMP_LOG, build_id, cpu};
use crac_criu::safe_dir::Dir;

/// Opens the image directory and checks it before anything else reads it: the seal is
/// complete, the directory and every file belong to this user and nobody else can write them,
/// and every image file matches the manifest (the page files' digests left for later under
/// [`Scope::ExceptPages`]). Its descriptor is then what CRIU reads through.
pub fn verified_image_scoped(
    path: &Path,
    scope: Scope,
    note: &mut dyn FnMut(&str),
) -> Result<(Dir, Vec<Deferred>), Error> {
    let dir = Dir::open_trusted(path, sys::euid()).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("image directory {}: {e}", path.display()),
        )
    })?;
    manifest::wait_sealed(&dir, SEAL_WAIT)?;
    let (c, deferred) = manifest::verify_scoped(&dir, sys::euid(), scope)?;
    let later: u64 = deferred.iter().map(Deferred::size).sum();
    note(&format!(
        "image matches its manifest: {} files, {:.1} MB checked in {:.1} ms{}",
        c.files,
        c.bytes as f64 / 1e6,
        c.took.as_secs_f64() * 1e3,
        if deferred.is_empty() {
            String::new()
        } else {
            format!(
                " ({} page file(s), {:.1} MB, checked while the process runs)",
                deferred.len(),
                later as f64 / 1e6
            )
        }
    ));
    if dir.stat("inventory.img").ok().flatten().is_none() {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "{} holds no complete image (no inventory.img): the checkpoint did not finish; \
                 see {}",
                dir.path().display(),
                dir.path().join(DUMP_LOG).display()
            ),
        ));
    }
    // CRIU inherits it (`-D /proc/self/fd/N`).
    sys::set_cloexec(dir.fd(), false)
        .map_err(|e| Error::new(ErrorKind::Other, format!("fcntl: {e}")).with_source(e))?;
    Ok((dir, deferred))
}

/// How long a restore waits for a dump helper still sealing the image.
const SEAL_WAIT: Duration = Duration::from_secs(120);

/// Refuses to restore on a CPU that lacks a feature the image's process may use.
pub fn check_cpu(meta: &Metadata) -> Result<(), Error> {
    let host = cpu::host_features();
    let missing = cpu::missing(&meta.cpu_features, &host);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Refused,
        format!(
            "restore refused: this CPU lacks {} that the image's process may use (the program \
             and its C library chose code paths for the CPU it was checkpointed on, and would \
             die of an illegal instruction here); restore on a CPU with them, or checkpoint on \
             the oldest CPU model the image must run on",
            missing.join(", ")
        ),
    ))
}

/// Checks that the executable the image was taken from is still the same build.
pub fn check_build(meta: &Metadata) -> Result<(), Error> {
    let now = build_id::build_id(&meta.exe).map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!(
                "the image's executable {} cannot be read ({e}); the image can only be restored \
                 where that build of the program is installed at the same path",
                meta.exe.display()
            ),
        )
    })?;
    if now != meta.build_id {
        return Err(Error::new(
            ErrorKind::Config,
            format!(
                "the image was taken from another build of {}: image build id {}, the file now \
                 has {}; restore it with the build it was taken from, or take a new checkpoint \
                 with the current build",
                meta.exe.display(),
                meta.build_id,
                now
            ),
        ));
    }
    Ok(())
}
