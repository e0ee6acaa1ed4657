//! `--idle N`: keep-alive connections opened before the run, each after one
//! answered request, and held unused (reopened when the server drops one).

use super::*;

impl Worker<'_> {
    /// Input on a parked connection: the server closed it (or sent junk).
    pub(super) fn parked_input(&mut self, slot: usize) {
        let c = self.conn(slot);
        let role = c.role;
        let mut b = [0u8; 512];
        // Over TLS this is also where TLS 1.3 session tickets arrive after the
        // handshake: they give no plaintext (WouldBlock) and keep the connection.
        match c.recv(&mut b) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            _ => {}
        }
        if role == Role::Idle {
            self.stats.idle_dropped += 1;
            self.idle_reopen_pending += 1;
        }
        self.close(slot);
    }

    pub(super) fn open_idle(&mut self) {
        let url = 0;
        self.idle_setting_up += 1;
        match self.open(url, Role::Idle) {
            Ok((slot, connected)) => {
                if connected {
                    self.on_connected(slot);
                }
            }
            Err(e) => {
                self.idle_setting_up -= 1;
                self.stats.idle_errors += 1;
                self.note(url, &format!("idle connection: {}", errmsg(&e)));
            }
        }
    }

    /// Open and hold this thread's idle connections (before the run).
    pub(super) fn setup_idle(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + self.plan.timeout;
        let mut opened = 0;
        let mut next_tick = Instant::now() + TICK;
        loop {
            while opened < self.tp.idle && (self.idle_setting_up as usize) < IDLE_SETUP_CONCURRENCY
            {
                opened += 1;
                self.open_idle();
            }
            if opened >= self.tp.idle && self.idle_setting_up == 0 {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                // Give up on the stragglers.
                self.scan_timeouts(now + self.plan.timeout);
                break;
            }
            self.wait(TICK.min(deadline - now))?;
            let now = Instant::now();
            if now >= next_tick {
                self.scan_timeouts(now);
                next_tick = now + TICK;
            }
        }
        self.stats.idle_held_at_start = self.idle_open;
        self.idle_reopen_pending = 0;
        Ok(())
    }
}
