//! fio beside the servers in `cold` (and `large`): the same disk read the
//! way the servers read it, random `O_DIRECT` reads at set depths.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::data::DataSet;
use crate::servers;

/// Files fio reads on the emulated disk (spread evenly over the data set).
const FIO_FILES: usize = 256;
/// Longest option value fio accepts, less a margin.
const FIO_MAX_OPTION: usize = 4000;
/// Descriptors a fio job keeps for itself beside the files it holds open.
const FIO_FD_MARGIN: usize = 256;

/// What fio reads.
pub enum FioTarget {
    /// Files named relative to a directory (at most what fits in one fio option):
    /// the emulated disk, where a sample spread over the platter sees every seek
    /// distance and no cache can hold it.
    Files { root: PathBuf, files: Vec<String> },
    /// The whole data set, as the servers read it: one directory of hard links per
    /// fio job (see [`fio_groups`]).
    Groups(Vec<PathBuf>),
}

/// fio random reads of `bs` bytes, O_DIRECT, libaio, `depth` in flight in all;
/// returns (IOPS, MB/s). With [`FioTarget::Groups`], one job (a process of its own)
/// per group, as many groups as the depth allows (a depth of 1 reads one group,
/// which is spread over the whole set), the depth shared among them.
pub fn fio(
    target: &FioTarget,
    bs: u64,
    depth: u32,
    seconds: f64,
    work: &Path,
) -> Result<(f64, f64)> {
    let mut job = format!(
        "[global]\nrw=randread\ndirect=1\nioengine=libaio\nfile_service_type=random\n\
         group_reporting\ntime_based\nbs={bs}\nruntime={}ms\n",
        (seconds * 1000.0) as u64
    );
    match target {
        FioTarget::Files { root, files } => {
            job += &format!(
                "[randread]\niodepth={depth}\ndirectory={}\nfilename={}\n",
                root.display(),
                files.join(":")
            );
        }
        FioTarget::Groups(groups) => {
            let jobs = (depth as usize).min(groups.len()).max(1);
            for (k, g) in groups.iter().take(jobs).enumerate() {
                let qd = depth as usize / jobs + usize::from(k < depth as usize % jobs);
                job += &format!("[g{k}]\niodepth={qd}\nopendir={}\n", g.display());
            }
        }
    }
    run_fio_job(&job, work)
}

/// Runs one fio job file (written to `work`); returns (IOPS, MB/s) of all its jobs
/// together (`group_reporting`: jobs[0] sums every job).
pub fn run_fio_job(job: &str, work: &Path) -> Result<(f64, f64)> {
    let jobfile = work.join("fio.job");
    std::fs::write(&jobfile, job).context("writing the fio job file")?;
    let out = Command::new(servers::which("fio").context("fio is not installed")?)
        // A command-line option only: fio refuses to write anything.
        .arg("--readonly")
        .arg("--output-format=json")
        .arg(&jobfile)
        .stdin(Stdio::null())
        .output()
        .context("running fio")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "fio failed: {}",
            err.lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect::<String>()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let start = text.find('{').context("fio printed no JSON")?;
    let v: Value = serde_json::from_str(&text[start..]).context("parsing fio's JSON")?;
    let r = v
        .pointer("/jobs/0/read")
        .context("fio JSON without jobs[0].read")?;
    let iops = r.get("iops").and_then(Value::as_f64).unwrap_or(0.0);
    let bw = r.get("bw_bytes").and_then(Value::as_f64).unwrap_or(0.0);
    Ok((iops, bw / 1e6))
}

/// Up to [`FIO_FILES`] files spread evenly over the set, as many as fit in one fio
/// option (fio takes at most 4,095 bytes in one).
pub fn fio_files(set: &DataSet) -> Vec<String> {
    let n = set.files.len();
    let step = (n / FIO_FILES).max(1);
    let mut len = 0;
    (0..n)
        .step_by(step)
        .take(FIO_FILES)
        .map(|i| set.files[i].clone())
        .take_while(|f| {
            len += f.len() + 1;
            len <= FIO_MAX_OPTION
        })
        .collect()
}

/// Directories of hard links that split the whole data set among fio jobs. fio reads
/// only among the files it holds open (with fewer open than it was given, it keeps to
/// that subset), and a process may hold `nofile` descriptors, fewer than the set has
/// files; so each job gets a group small enough to hold open, every J-th file of the
/// set (each group spans the whole disk). fio does not follow symbolic links, so these
/// are hard links, beside the set on the same file system (inside it they would be
/// served, and would reorder slowdisk's layout walk). Made once, reused while complete.
pub fn fio_groups(set: &DataSet, nofile: usize) -> Result<Vec<PathBuf>> {
    let per_group = nofile.saturating_sub(FIO_FD_MARGIN).max(1);
    let n = set.files.len();
    let groups = n.div_ceil(per_group).max(1);
    let name = set
        .dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = set
        .dir
        .parent()
        .context("data set directory has no parent")?;
    let farm = parent.join(format!(".fio-{name}-{groups}"));
    let dirs: Vec<PathBuf> = (0..groups).map(|k| farm.join(format!("g{k}"))).collect();
    let marker = farm.join(".complete");
    if marker.exists() {
        return Ok(dirs);
    }
    let _ = std::fs::remove_dir_all(&farm);
    for d in &dirs {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    for (i, f) in set.files.iter().enumerate() {
        let link = dirs[i % groups].join((i / groups).to_string());
        std::fs::hard_link(set.dir.join(f), &link)
            .with_context(|| format!("linking {} for fio", link.display()))?;
    }
    std::fs::write(&marker, b"").context("marking the fio links complete")?;
    Ok(dirs)
}

/// The fio rows, one table: queue depth -> (iops, MB/s) medians.
pub fn fio_markdown(fio: &BTreeMap<u32, Vec<(f64, f64)>>, bs: u64, target: &FioTarget) -> String {
    let over = match target {
        FioTarget::Files { files, .. } => {
            format!("over {} files spread over the data set", files.len())
        }
        FioTarget::Groups(g) => format!(
            "over every file of the data set, as the servers read it ({} job{}, each holding its share open)",
            g.len(),
            if g.len() == 1 { "" } else { "s" }
        ),
    };
    let mut o = format!(
        "## fio: random {} KiB O_DIRECT reads (libaio) {over}\n\n| queue depth | IOPS median | MB/s median (min–max) |\n|---:|---:|---:|\n",
        bs / 1024,
    );
    for (qd, v) in fio {
        let mut io: Vec<f64> = v.iter().map(|x| x.0).collect();
        let mut mb: Vec<f64> = v.iter().map(|x| x.1).collect();
        io.sort_by(|a, b| a.total_cmp(b));
        mb.sort_by(|a, b| a.total_cmp(b));
        if mb.is_empty() {
            continue;
        }
        o.push_str(&format!(
            "| {qd} | {:.0} | {:.1} ({:.1}–{:.1}) |\n",
            io[io.len() / 2],
            mb[mb.len() / 2],
            mb[0],
            mb[mb.len() - 1]
        ));
    }
    o
}

pub fn fio_best_mb(fio: &BTreeMap<u32, Vec<(f64, f64)>>) -> Option<f64> {
    fio.values()
        .filter_map(|v| {
            let mut mb: Vec<f64> = v.iter().map(|x| x.1).collect();
            mb.sort_by(|a, b| a.total_cmp(b));
            mb.get(mb.len() / 2).copied()
        })
        .reduce(f64::max)
}
