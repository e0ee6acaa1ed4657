//! The connection table: slots with generations.
//!
//! A slot is a connection's index in the table; its generation tells
//! this connection from the earlier ones that had the same slot. A
//! [`Ticket`] names both, so that anything that outlives a step of the
//! connection (an operation's completion, a listing job, a
//! throttled response waiting for the tick) finds its connection again
//! or finds it gone, never a stranger in its slot.
//!
//! **Invariant:** a generation is never 0 and stays below 2^31, so it
//! fits the 32 bits an operation's user data gives it (`worker::ring::ud`).

/// Generations wrap below this.
const MAX_GEN: u32 = (1 << 31) - 1;

/// Names one connection for as long as it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    pub slot: u32,
    pub gen: u32,
}

impl Ticket {
    /// The ticket as one number (generation high, slot low).
    pub fn token(self) -> u64 {
        (self.gen as u64) << 32 | self.slot as u64
    }

    pub fn from_token(t: u64) -> Ticket {
        Ticket {
            slot: t as u32,
            gen: (t >> 32) as u32,
        }
    }
}

struct Entry<C> {
    gen: u32,
    conn: C,
}

/// The connections of one worker: at most `max` at once.
pub struct Slots<C> {
    entries: Vec<Option<Entry<C>>>,
    free: Vec<u32>,
    live: usize,
    max: usize,
    next_gen: u32,
}

impl<C> Slots<C> {
    pub fn new(max: usize) -> Slots<C> {
        Slots {
            entries: Vec::new(),
            free: Vec::new(),
            live: 0,
            max,
            next_gen: 1,
        }
    }

    /// Connections in the table.
    pub fn live(&self) -> usize {
        self.live
    }

    /// The table holds its limit (`--max-connections` / workers).
    pub fn full(&self) -> bool {
        self.live >= self.max
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Puts a connection in a free slot (a freed one first), under a new
    /// generation.
    pub fn insert(&mut self, conn: C) -> Ticket {
        debug_assert!(self.live < self.max, "a slot past the connection limit");
        let gen = self.next_gen;
        self.next_gen = (self.next_gen % MAX_GEN) + 1;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.entries.push(None);
            (self.entries.len() - 1) as u32
        });
        let e = &mut self.entries[slot as usize];
        assert!(e.is_none(), "slot {slot} handed out twice");
        *e = Some(Entry { gen, conn });
        self.live += 1;
        Ticket { slot, gen }
    }

    /// The connection a ticket names, if it is still there.
    pub fn get(&mut self, t: Ticket) -> Option<&mut C> {
        match self.entries.get_mut(t.slot as usize) {
            Some(Some(e)) if e.gen == t.gen => Some(&mut e.conn),
            _ => None,
        }
    }

    /// The connection in a slot, whatever its generation.
    pub fn at(&mut self, slot: u32) -> Option<&mut C> {
        self.entries
            .get_mut(slot as usize)
            .and_then(|e| e.as_mut().map(|e| &mut e.conn))
    }

    /// The connection in a slot that the caller knows is live (it holds an
    /// operation in flight, or was just looked up).
    pub fn live_at(&mut self, slot: u32) -> &mut C {
        self.at(slot).expect("live slot")
    }

    /// The ticket of the connection in a slot.
    pub fn ticket(&self, slot: u32) -> Option<Ticket> {
        match self.entries.get(slot as usize) {
            Some(Some(e)) => Some(Ticket { slot, gen: e.gen }),
            _ => None,
        }
    }

    /// Takes the connection out of its slot, which is free again.
    pub fn remove(&mut self, slot: u32) -> Option<C> {
        let e = self.entries.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        self.live -= 1;
        Some(e.conn)
    }

    /// Every live connection with its ticket.
    pub fn iter(&self) -> impl Iterator<Item = (Ticket, &C)> {
        self.entries.iter().enumerate().filter_map(|(i, e)| {
            e.as_ref().map(|e| {
                (
                    Ticket {
                        slot: i as u32,
                        gen: e.gen,
                    },
                    &e.conn,
                )
            })
        })
    }

    /// The tickets of the live connections `pick` chooses.
    pub fn select(&self, mut pick: impl FnMut(&C) -> bool) -> Vec<Ticket> {
        self.iter()
            .filter(|(_, c)| pick(c))
            .map(|(t, _)| t)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_slot_has_a_new_generation() {
        let mut s = Slots::new(2);
        let a = s.insert("a");
        assert_eq!(s.remove(a.slot), Some("a"));
        let b = s.insert("b");
        assert_eq!(a.slot, b.slot);
        assert_ne!(a.gen, b.gen);
        assert!(s.get(a).is_none(), "the old ticket finds nothing");
        assert_eq!(s.get(b).copied(), Some("b"));
        assert_eq!(Ticket::from_token(b.token()), b);
    }

    #[test]
    fn generations_stay_below_2_31_and_are_never_0() {
        let mut s = Slots::new(1);
        s.next_gen = MAX_GEN;
        let a = s.insert(());
        assert_eq!(a.gen, MAX_GEN);
        s.remove(a.slot);
        let b = s.insert(());
        assert_eq!(b.gen, 1);
    }

    #[test]
    fn live_counts_and_the_limit() {
        let mut s = Slots::new(2);
        let a = s.insert(1);
        s.insert(2);
        assert!(s.full());
        assert_eq!(s.live(), 2);
        s.remove(a.slot);
        assert!(!s.full());
        assert_eq!(s.select(|&c| c == 2).len(), 1);
    }
}
