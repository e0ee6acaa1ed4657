//! `mkfiles`: the seeds' data sets with random content, idempotent, verified when present.
//!
//! | set | files | size | names |
//! |---|---|---|---|
//! | small | 1,000 folders × 100 | 100 KiB | `files-I/J` (seed 004's script) |
//! | large | 1,000 | 10 MiB | `file-N` |
//! | huge | 1 | 700 MiB | `file-700M` |
//! | tiny | 1,000 | 1 KiB | `N` |
//!
//! Each set lives in its own directory, `DATA/<set>` at scale 1 and `DATA/<set>-s<scale>`
//! otherwise, with a `.manifest.json` holding its shape and the FNV-1a checksums of a
//! sample of its files, written at creation. The content of each file is a pseudo-random
//! stream seeded by the file's name, so a file found missing or damaged is rewritten
//! with exactly the bytes the checksums expect.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rand::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};

/// Files spot-checked per set (checksums in the manifest).
const SAMPLES: usize = 64;
/// Write buffer.
const CHUNK: usize = 1 << 20;
/// Files per folder in the small set, as the seed's script.
const FILES_PER_FOLDER: usize = 100;

#[derive(clap::Args, Debug, Clone)]
pub struct MkfilesArgs {
    /// Where the data sets go.
    #[arg(long, default_value = "/var/tmp/spindle-bench-data")]
    pub data: PathBuf,
    /// Sets to make, comma-separated: small, large, huge, tiny.
    #[arg(long, value_delimiter = ',', default_value = "small,large,huge,tiny")]
    pub sets: Vec<String>,
    /// Shrink every set by this factor (file counts; the huge file's size). 0 < scale <= 1.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetKind {
    Small,
    Large,
    Huge,
    Tiny,
}

impl SetKind {
    pub fn parse(s: &str) -> Result<SetKind> {
        Ok(match s.trim() {
            "small" => SetKind::Small,
            "large" => SetKind::Large,
            "huge" => SetKind::Huge,
            "tiny" => SetKind::Tiny,
            other => bail!("unknown data set {other:?}: expected small, large, huge or tiny"),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            SetKind::Small => "small",
            SetKind::Large => "large",
            SetKind::Huge => "huge",
            SetKind::Tiny => "tiny",
        }
    }
}

/// A data set's shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub set: String,
    pub scale: f64,
    pub files: usize,
    pub file_size: u64,
    /// (relative path, FNV-1a 64 of the content) of sampled files.
    pub samples: Vec<(String, String)>,
}

/// A data set on disk.
#[derive(Debug, Clone)]
pub struct DataSet {
    pub dir: PathBuf,
    pub files: Vec<String>,
    pub file_size: u64,
}

pub fn validate_scale(scale: f64) -> Result<()> {
    if !(scale > 0.0 && scale <= 1.0) {
        bail!("--scale must be in (0, 1], got {scale}");
    }
    Ok(())
}

/// The shape of a set at a scale: relative paths and file size.
pub fn shape(kind: SetKind, scale: f64) -> (Vec<String>, u64) {
    let n = |full: usize| ((full as f64 * scale).round() as usize).max(1);
    match kind {
        SetKind::Small => {
            let total = n(100_000);
            let files = (0..total)
                .map(|k| {
                    format!(
                        "files-{}/{}",
                        k / FILES_PER_FOLDER + 1,
                        k % FILES_PER_FOLDER + 1
                    )
                })
                .collect();
            (files, 100 * 1024)
        }
        SetKind::Large => (
            (1..=n(1000)).map(|i| format!("file-{i}")).collect(),
            10 << 20,
        ),
        SetKind::Huge => {
            let size = (((700u64 << 20) as f64 * scale) as u64 / 4096 * 4096).max(1 << 20);
            (vec!["file-700M".to_string()], size)
        }
        SetKind::Tiny => ((1..=n(1000)).map(|i| i.to_string()).collect(), 1024),
    }
}

pub fn set_dir(data: &Path, kind: SetKind, scale: f64) -> PathBuf {
    if scale == 1.0 {
        data.join(kind.name())
    } else {
        data.join(format!("{}-s{}", kind.name(), scale))
    }
}

fn fnv1a(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}
const FNV_OFFSET: u64 = 0xcbf29ce484222325;

/// Writes one file with its content stream; returns its checksum.
fn write_file(path: &Path, rel: &str, size: u64, set: &str) -> Result<u64> {
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let seed = fnv1a(FNV_OFFSET, format!("{set}/{rel}").as_bytes());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let tmp = path.with_extension("mkfiles-tmp");
    let mut f = std::io::BufWriter::with_capacity(
        CHUNK,
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?,
    );
    let mut buf = vec![0u8; CHUNK.min(size as usize).max(1)];
    let mut left = size;
    let mut h = FNV_OFFSET;
    while left > 0 {
        let n = (buf.len() as u64).min(left) as usize;
        rng.fill_bytes(&mut buf[..n]);
        h = fnv1a(h, &buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    Ok(h)
}

fn checksum_file(path: &Path) -> Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; CHUNK];
    let mut h = FNV_OFFSET;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(h);
        }
        h = fnv1a(h, &buf[..n]);
    }
}

fn sample_indices(n: usize) -> Vec<usize> {
    let step = (n / SAMPLES).max(1);
    let mut v: Vec<usize> = (0..n).step_by(step).take(SAMPLES).collect();
    if !v.contains(&(n - 1)) {
        v.push(n - 1);
    }
    v
}

/// Makes the set if missing, else verifies it (sizes of every file, checksums of the
/// samples) and rewrites what is missing or damaged. Returns the set.
pub fn ensure(data: &Path, kind: SetKind, scale: f64, verbose: bool) -> Result<DataSet> {
    validate_scale(scale)?;
    let dir = set_dir(data, kind, scale);
    let (files, size) = shape(kind, scale);
    let manifest_path = dir.join(".manifest.json");
    let existing: Option<Manifest> = std::fs::read_to_string(&manifest_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let samples = sample_indices(files.len());
    let bar = indicatif::ProgressBar::new(files.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix} {bar:30} {pos}/{len} {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_prefix(format!("mkfiles {}", kind.name()));
    let mut rewritten = 0usize;
    let manifest = match existing {
        Some(m) if m.files == files.len() && m.file_size == size && m.set == kind.name() => {
            // Verify: every size, then the sampled checksums.
            for rel in &files {
                let p = dir.join(rel);
                let ok = std::fs::metadata(&p)
                    .map(|md| md.len() == size)
                    .unwrap_or(false);
                if !ok {
                    write_file(&p, rel, size, kind.name())?;
                    rewritten += 1;
                }
                bar.inc(1);
            }
            for (rel, sum) in &m.samples {
                let p = dir.join(rel);
                let got = checksum_file(&p)
                    .map(|h| format!("{h:016x}"))
                    .unwrap_or_default();
                if &got != sum {
                    eprintln!(
                        "mkfiles: {} has checksum {got}, expected {sum}: rewriting it",
                        p.display()
                    );
                    let h = write_file(&p, rel, size, kind.name())?;
                    if format!("{h:016x}") != *sum {
                        bail!(
                            "{}: rewritten content does not match the manifest",
                            p.display()
                        );
                    }
                    rewritten += 1;
                }
            }
            m
        }
        _ => {
            let _ = std::fs::remove_file(&manifest_path);
            let mut sums = Vec::new();
            for (i, rel) in files.iter().enumerate() {
                let p = dir.join(rel);
                let present = std::fs::metadata(&p)
                    .map(|md| md.len() == size)
                    .unwrap_or(false);
                let h = if present && !samples.contains(&i) {
                    None
                } else if present {
                    Some(checksum_file(&p)?)
                } else {
                    rewritten += 1;
                    Some(write_file(&p, rel, size, kind.name())?)
                };
                if samples.contains(&i) {
                    sums.push((rel.clone(), format!("{:016x}", h.unwrap_or(0))));
                }
                bar.inc(1);
            }
            let m = Manifest {
                set: kind.name().into(),
                scale,
                files: files.len(),
                file_size: size,
                samples: sums,
            };
            std::fs::write(&manifest_path, serde_json::to_string_pretty(&m)? + "\n")?;
            m
        }
    };
    bar.finish_and_clear();
    if verbose {
        eprintln!(
            "mkfiles: {} ({} files of {} bytes, {:.2} GB) in {}: {}",
            manifest.set,
            manifest.files,
            manifest.file_size,
            (manifest.files as u64 * manifest.file_size) as f64 / 1e9,
            dir.display(),
            if rewritten == 0 {
                "present and verified".to_string()
            } else {
                format!("{rewritten} file(s) written")
            }
        );
    }
    Ok(DataSet {
        dir,
        files,
        file_size: size,
    })
}

pub fn run(a: MkfilesArgs) -> Result<()> {
    validate_scale(a.scale)?;
    let kinds: Vec<SetKind> = a
        .sets
        .iter()
        .map(|s| SetKind::parse(s))
        .collect::<Result<_>>()?;
    for k in kinds {
        ensure(&a.data, k, a.scale, true)?;
    }
    Ok(())
}
