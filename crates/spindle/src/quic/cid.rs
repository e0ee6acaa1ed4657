//! Connection IDs that name the worker holding the connection.
//!
//! Every connection ID this server issues is [`CID_LEN`] bytes: the first
//! is `generation << 7 | worker` (the worker's index in its socket's
//! `SO_REUSEPORT` group, below [`MAX_WORKERS`]), the other seven random
//! (from the kernel's generator, as RFC 9000 §5.1 asks: an observer
//! learns which of at most 128 workers holds a connection, nothing that
//! links two IDs of one connection). [`steering_program`] is the
//! classic-BPF program the group's sockets carry: it reads that byte from
//! each datagram's destination connection ID, so every packet of a
//! connection, after a client's address changes too (NAT rebinding,
//! migration), reaches the worker that holds it. A client's first
//! Initial names an ID the client chose at random: its byte picks the
//! worker, which answers with IDs of its own.

use std::time::Duration;

use quinn_proto::{ConnectionId, ConnectionIdGenerator, InvalidCid};

/// Bytes of every connection ID we issue: one naming the worker, seven
/// random (56 bits: a guess at a live ID is hopeless).
pub const CID_LEN: usize = 8;

/// Workers one steering byte can name (its low seven bits).
pub const MAX_WORKERS: usize = 128;

/// Issues connection IDs naming one worker.
#[derive(Debug)]
pub struct WorkerCids {
    first: u8,
}

impl WorkerCids {
    /// IDs for `worker` (its index in the socket group) of a server
    /// process of `generation` (0 or 1, flipped at each binary handover,
    /// so that the new process tells its own connections from the old
    /// one's).
    pub fn new(worker: usize, generation: u8) -> WorkerCids {
        assert!(worker < MAX_WORKERS, "worker {worker} over {MAX_WORKERS}");
        assert!(generation < 2);
        WorkerCids {
            first: generation << 7 | worker as u8,
        }
    }
}

/// The worker (socket index) a destination connection ID's first byte
/// names in a group of `workers`: what [`steering_program`] computes.
pub fn worker_of(first: u8, workers: usize) -> usize {
    assert!(workers > 0 && workers <= MAX_WORKERS);
    usize::from(first & 0x7f) % workers
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let mut id = [0u8; CID_LEN];
        id[0] = self.first;
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id[1..])
            .expect("the kernel's random numbers");
        ConnectionId::new(&id)
    }

    /// A short-header packet whose ID names another worker (or another
    /// generation) is dropped, not answered with a stateless reset: it
    /// is some other process's or some other worker's.
    fn validate(&self, cid: &ConnectionId) -> Result<(), InvalidCid> {
        match cid.first() {
            Some(&b) if cid.len() == CID_LEN && b == self.first => Ok(()),
            _ => Err(InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

/// One instruction of a classic BPF program (`struct sock_filter`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// Classic BPF opcodes (linux/filter.h).
const BPF_LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
const BPF_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const BPF_JA: u16 = 0x05; // BPF_JMP | BPF_JA
const BPF_AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const BPF_MOD_K: u16 = 0x94; // BPF_ALU | BPF_MOD | BPF_K
const BPF_RET_A: u16 = 0x16; // BPF_RET | BPF_A

/// The `SO_ATTACH_REUSEPORT_CBPF` program for a group of `workers`
/// sockets: it sees each datagram from its UDP payload on (the kernel
/// pulls the UDP header first) and returns the index of the socket to
/// deliver it to, [`worker_of`] the first byte of the destination
/// connection ID: byte 1 of a short header, byte 6 of a long one (flags,
/// four bytes of version, the ID's length). A datagram too short to
/// hold it makes the program return 0 (the kernel then hashes the
/// address, as without a program), so garbage lands somewhere and is
/// dropped there.
pub fn steering_program(workers: usize) -> Vec<BpfInsn> {
    assert!(workers > 0 && workers <= MAX_WORKERS);
    let i = |code, jt, jf, k| BpfInsn { code, jt, jf, k };
    vec![
        i(BPF_LD_B_ABS, 0, 0, 0),           // A = flags
        i(BPF_JSET_K, 2, 0, 0x80),          // long header? to 4
        i(BPF_LD_B_ABS, 0, 0, 1),           // A = short header's DCID[0]
        i(BPF_JA, 0, 0, 1),                 // to 5
        i(BPF_LD_B_ABS, 0, 0, 6),           // A = long header's DCID[0]
        i(BPF_AND_K, 0, 0, 0x7f),           // the worker bits
        i(BPF_MOD_K, 0, 0, workers as u32), // within the group
        i(BPF_RET_A, 0, 0, 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `prog` over `packet` as the kernel's classic-BPF interpreter
    /// would for the opcodes it uses (a load past the end returns 0).
    fn run(prog: &[BpfInsn], packet: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let x = prog[pc];
            pc += 1;
            match x.code {
                BPF_LD_B_ABS => match packet.get(x.k as usize) {
                    Some(&b) => a = u32::from(b),
                    None => return 0,
                },
                BPF_JSET_K => pc += usize::from(if a & x.k != 0 { x.jt } else { x.jf }),
                BPF_JA => pc += x.k as usize,
                BPF_AND_K => a &= x.k,
                BPF_MOD_K => a %= x.k,
                BPF_RET_A => return a,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn ids_name_their_worker_and_are_otherwise_random() {
        let mut g = WorkerCids::new(5, 1);
        let (a, b) = (g.generate_cid(), g.generate_cid());
        assert_eq!((a.len(), a[0], b[0]), (CID_LEN, 0x85, 0x85));
        assert_ne!(a[1..], b[1..]);
        assert!(g.validate(&a).is_ok());
        assert!(WorkerCids::new(5, 0).validate(&a).is_err());
        assert!(WorkerCids::new(4, 1).validate(&a).is_err());
        assert!(g.validate(&ConnectionId::new(&a[..4])).is_err());
    }

    #[test]
    fn the_program_steers_short_and_long_headers_by_the_ids_first_byte() {
        let prog = steering_program(3);
        for worker in 0..3 {
            let id = WorkerCids::new(worker, 1).generate_cid();
            let mut short = vec![0x40];
            short.extend_from_slice(&id);
            short.extend_from_slice(&[0; 20]);
            let mut long = vec![0xc0, 0, 0, 0, 1, CID_LEN as u8];
            long.extend_from_slice(&id);
            long.extend_from_slice(&[0; 20]);
            assert_eq!(run(&prog, &short), worker as u32);
            assert_eq!(run(&prog, &long), worker as u32);
            assert_eq!(worker_of(id[0], 3), worker);
        }
        // A client's random first ID picks a worker; garbage picks 0.
        assert_eq!(run(&prog, &[0xc3, 0, 0, 0, 1, 8, 0x7b]), 0x7b % 3);
        assert_eq!(run(&prog, &[0x40]), 0);
        assert_eq!(run(&prog, &[]), 0);
    }
}
