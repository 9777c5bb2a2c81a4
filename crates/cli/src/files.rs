//! Input and output files shared by the commands that read a capture and
//! write another file.

use anyhow::{bail, Context as _, Result};
use calliper_capture::CaptureReader;
use std::path::Path;

/// Refuses to write over the input (the same file by any name): the
/// reader has only its start in memory.
pub fn distinct(input: &Path, output: &Path) -> Result<()> {
    if calliper_store::files::same_file(input, output) {
        bail!("{} and {} are the same file", input.display(), output.display());
    }
    Ok(())
}

/// Whether two paths name one file, existing or to be made: the same text,
/// or the same place once resolved (`./a.db`, `sub/../a.db` and `$PWD/a.db`
/// name one file even before it exists).
pub fn same_path(a: &Path, b: &Path) -> bool {
    a == b || resolved(a).zip(resolved(b)).is_some_and(|(x, y)| x == y)
}

/// Where `path` is or would be: resolved whole when it exists, else its
/// directory resolved and its name added.
pub fn resolved(path: &Path) -> Option<std::path::PathBuf> {
    std::fs::canonicalize(path).ok().or_else(|| {
        let name = path.file_name()?;
        Some(std::fs::canonicalize(directory_of(path)).ok()?.join(name))
    })
}

/// Opens a pcap or pcapng capture.
pub fn reader(path: &Path) -> Result<CaptureReader<std::fs::File>> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    CaptureReader::new(file).with_context(|| path.display().to_string())
}

/// Refuses, before any work, an output that cannot be created: a
/// directory, or a path whose directory does not exist. For commands that
/// create their output only once the work is done.
pub fn creatable(output: &Path) -> Result<()> {
    if output == Path::new("-") {
        return Ok(());
    }
    if output.is_dir() {
        bail!("cannot create {}: a directory, give a file name", output.display());
    }
    let parent = directory_of(output);
    if !parent.is_dir() {
        bail!("cannot create {}: no directory {}", output.display(), parent.display());
    }
    Ok(())
}

/// The directory a file is (to be) in: `.` for a bare name.
pub fn directory_of(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}
