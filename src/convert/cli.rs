//! The edge of `karpenter-rs convert`: reads the `-f` inputs (files, directories as kubectl reads
//! them, stdin), runs the pure conversion and renders it in the `-o` format. Which files of a
//! directory are read, and in which order, is decided by `plan`, without I/O.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::{convert, Output, Settings, Source};

/// What `convert` prints: the objects for stdout and the lines for stderr (skipped documents,
/// and the comments JSON cannot carry).
#[derive(Clone, Debug, PartialEq)]
pub struct Printed {
    /// The v1 objects.
    pub stdout: String,
    /// One message per line.
    pub stderr: Vec<String>,
}

/// Why an input could not be read; each names the `-f` value it came from.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A file or directory that cannot be read.
    #[error("-f {arg}: reading {path}: {source}")]
    Read {
        /// The `-f` value.
        arg: String,
        /// The file or directory that failed.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory without a manifest.
    #[error("-f {arg}: no .yaml, .yml or .json file in the directory{}", if *recursive { " or its subdirectories" } else { " (-R reads its subdirectories too)" })]
    NoManifests {
        /// The `-f` value.
        arg: String,
        /// Whether subdirectories were read too.
        recursive: bool,
    },
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The file name.
    pub name: String,
    /// Whether it is a directory (not followed through a symbolic link, as kubectl does).
    pub is_dir: bool,
}

/// What to do with one entry of a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read this manifest.
    Read(String),
    /// Read this subdirectory the same way.
    Descend(String),
}

/// Whether kubectl reads a file of this name from a directory: `.yaml`, `.yml` or `.json`.
pub fn is_manifest(name: &str) -> bool {
    [".yaml", ".yml", ".json"].iter().any(|ext| name.ends_with(ext))
}

/// The steps for a directory's `entries`, as `kubectl apply -f DIR [-R]` takes them: by name
/// (byte order), manifests only, subdirectories at their place in that order when `recursive`.
pub fn plan(entries: &[Entry], recursive: bool) -> Vec<Step> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    sorted
        .into_iter()
        .filter_map(|e| match e.is_dir {
            true if recursive => Some(Step::Descend(e.name.clone())),
            true => None,
            false if is_manifest(&e.name) => Some(Step::Read(e.name.clone())),
            false => None,
        })
        .collect()
}

/// What one `convert` run reads, how it converts and how it prints (`config::ConvertArgs` gives
/// one from the command line).
#[derive(Clone, Debug, PartialEq)]
pub struct Invocation {
    /// The `-f` values: files, directories, or `-` for stdin.
    pub filenames: Vec<String>,
    /// Whether subdirectories of `-f` directories are read too (`-R`).
    pub recursive: bool,
    /// The `-o` format.
    pub output: Output,
    /// The conversion's settings.
    pub settings: Settings,
}

/// Runs `convert`: the text for stdout and the lines for stderr, or the message of the error.
pub fn run(invocation: impl Into<Invocation>) -> Result<Printed, String> {
    let args = invocation.into();
    let sources = read_sources(&args.filenames, args.recursive).map_err(|e| e.to_string())?;
    let converted = convert(&sources, &args.settings).map_err(|e| e.to_string())?;
    let (stdout, notes) = converted.render(args.output);
    let mut stderr = converted.skipped;
    stderr.extend(notes.into_iter().map(|n| format!("note: {n}")));
    Ok(Printed { stdout, stderr })
}

/// The inputs of every `-f` value in order: a file, every manifest of a directory (see `plan`),
/// or stdin for `-`. A file named explicitly is read whatever its extension, as kubectl does.
pub fn read_sources(filenames: &[String], recursive: bool) -> Result<Vec<Source>, InputError> {
    let mut sources = Vec::new();
    for arg in filenames {
        let read_error = |path: &Path, source| InputError::Read {
            arg: arg.clone(),
            path: path.display().to_string(),
            source,
        };
        if arg == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| read_error(Path::new("stdin"), e))?;
            sources.push(Source { name: arg.clone(), text });
            continue;
        }
        let path = PathBuf::from(arg);
        let metadata = std::fs::metadata(&path).map_err(|e| read_error(&path, e))?;
        if !metadata.is_dir() {
            let text = std::fs::read_to_string(&path).map_err(|e| read_error(&path, e))?;
            sources.push(Source { name: arg.clone(), text });
            continue;
        }
        let before = sources.len();
        read_directory(&path, recursive, &mut sources).map_err(|(p, e)| read_error(&p, e))?;
        if sources.len() == before {
            return Err(InputError::NoManifests {
                arg: arg.clone(),
                recursive,
            });
        }
    }
    Ok(sources)
}

/// Appends the manifests of `dir` (and of its subdirectories when `recursive`) to `sources`.
fn read_directory(dir: &Path, recursive: bool, sources: &mut Vec<Source>) -> Result<(), (PathBuf, std::io::Error)> {
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| (dir.to_path_buf(), e))? {
        let entry = entry.map_err(|e| (dir.to_path_buf(), e))?;
        let is_dir = entry.file_type().map_err(|e| (entry.path(), e))?.is_dir();
        entries.push(Entry {
            name: entry.file_name().to_string_lossy().into_owned(),
            is_dir,
        });
    }
    for step in plan(&entries, recursive) {
        match step {
            Step::Read(name) => {
                let path = dir.join(name);
                let text = std::fs::read_to_string(&path).map_err(|e| (path.clone(), e))?;
                sources.push(Source {
                    name: path.display().to_string(),
                    text,
                });
            }
            Step::Descend(name) => read_directory(&dir.join(name), recursive, sources)?,
        }
    }
    Ok(())
}
