//! Key layout. Every per-memory key starts with the memory id and a NUL byte (ids never hold
//! NUL), so one memory's entries are one contiguous key range and "a" never scans into "ab".
//! Numbers are big-endian so key order is numeric order.

/// The key of a memory's own record.
pub fn memory(memory: &str) -> Vec<u8> {
    memory.as_bytes().to_vec()
}

/// The prefix of every entry that belongs to `memory` in a per-memory table.
pub fn memory_prefix(memory: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(memory.len() + 1);
    k.extend_from_slice(memory.as_bytes());
    k.push(0);
    k
}

/// `memory` NUL `n` (8 bytes, big-endian).
pub fn seq(memory: &str, n: u64) -> Vec<u8> {
    let mut k = memory_prefix(memory);
    k.extend_from_slice(&n.to_be_bytes());
    k
}

/// `memory` NUL `a` `b` (each 8 bytes, big-endian).
pub fn seq2(memory: &str, a: u64, b: u64) -> Vec<u8> {
    let mut k = seq(memory, a);
    k.extend_from_slice(&b.to_be_bytes());
    k
}

/// The number a `seq` or `seq2` key ends with (its last 8 bytes).
pub fn last_number(key: &[u8]) -> u64 {
    u64::from_be_bytes(
        key[key.len() - 8..]
            .try_into()
            .expect("a key ending in an 8-byte number"),
    )
}

/// The first number of a `seq2` key (the 8 bytes before its last 8).
pub fn seq2_first(key: &[u8]) -> u64 {
    last_number(&key[..key.len() - 8])
}

/// The prefix of every `seq2(memory, a, _)` key.
pub fn seq2_prefix(memory: &str, a: u64) -> Vec<u8> {
    seq(memory, a)
}

/// `memory` NUL `name`: a name's key, the name cut (at a char boundary) with a hash of the
/// whole appended when long, so any name fits lmdb's key limit with the memory id.
pub fn name(memory: &str, name: &str) -> Vec<u8> {
    const KEEP: usize = 160;
    let mut k = memory_prefix(memory);
    if name.len() <= KEEP + 16 {
        k.extend_from_slice(name.as_bytes());
    } else {
        let mut end = KEEP;
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        k.extend_from_slice(&name.as_bytes()[..end]);
        // FNV-1a: stable across builds and platforms.
        let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        k.extend_from_slice(format!("#{h:016x}").as_bytes());
    }
    k
}
