//! The `aio-poll` model: Linux native AIO `IOCB_CMD_POLL` (4.18+) through
//! `io_submit`/`io_getevents`, via the workspace's `linux-aio` bindings.
//! This is the paper's "async poll", as it finally reached mainline.
//!
//! A poll iocb names no buffer, so nothing the kernel holds can dangle; the
//! context is destroyed (cancelling outstanding polls) on drop.

use crate::bench::{Bench, Fault};
use anyhow::{bail, Context as _, Result};
use linux_aio::{Context, IoEvent, Iocb};

/// Most completions reaped per `io_getevents`.
pub const AIO_MAX_EVENTS: usize = 1024;
/// Most iocbs per `io_submit`.
pub const AIO_SUBMIT_BATCH: usize = 1024;

fn submit_all(ctx: &Context, cbs: &mut Vec<Iocb>) -> Result<()> {
    let mut done = 0;
    while done < cbs.len() {
        let end = (done + AIO_SUBMIT_BATCH).min(cbs.len());
        // SAFETY: poll iocbs name no buffer; the iocbs are copied by the
        // kernel during the call.
        let n = unsafe { ctx.submit(&mut cbs[done..end]) }.context("io_submit(IOCB_CMD_POLL)")?;
        if n == 0 {
            bail!("io_submit accepted no iocb");
        }
        done += n;
    }
    cbs.clear();
    Ok(())
}

pub(crate) fn run_aio_poll(b: &mut Bench, fault: Fault) -> Result<()> {
    let n = b.core.n;
    let ctx = Context::new((n + AIO_MAX_EVENTS) as u32).with_context(|| {
        format!(
            "io_setup({}): see /proc/sys/fs/aio-max-nr",
            n + AIO_MAX_EVENTS
        )
    })?;
    let mut cbs: Vec<Iocb> = (0..n)
        .map(|i| Iocb::poll(b.core.pipes.r[i], libc::POLLIN, i as u64))
        .collect();
    submit_all(&ctx, &mut cbs)?;
    b.seed(fault)?;
    let mut evs = vec![IoEvent::default(); AIO_MAX_EVENTS.min(n.max(1))];
    let stall = b.core.stall;
    while !b.core.done() {
        let got = match ctx.get_events(1, &mut evs, Some(stall)) {
            Ok(g) => g,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("io_getevents"),
        };
        if got.is_empty() {
            return Err(b.core.stalled());
        }
        for ev in got {
            let i = ev.data as usize;
            if ev.res < 0 {
                bail!("aio poll on pipe {i} failed: errno {}", -ev.res);
            }
            if ev.res & libc::POLLIN as i64 == 0 {
                bail!("aio poll on pipe {i} completed with mask {:#x}", ev.res);
            }
            b.read_ready(i, false)?;
            cbs.push(Iocb::poll(b.core.pipes.r[i], libc::POLLIN, i as u64));
        }
        submit_all(&ctx, &mut cbs)?;
    }
    Ok(())
}
