//! Forward error correction for CHECKSUMMED connections (issue 4, seed 002 §3.1.6: "forward
//! error corrected on the other side"): one XOR parity block per group of `k` data blocks.
//!
//! The parity of group `g` (data blocks `g·k … min((g+1)·k, TBLOCK) − 1`) travels as a DATA
//! packet with PBLOCK = TBLOCK + g. Its payload is the XOR of every block of the group written
//! as `[len: u16 BE][data][zero padding]`, all padded to the longest, so the one missing block's
//! length is recovered with its bytes. A group with two or more losses is not repairable.

/// Number of groups for `tblock` data blocks.
pub fn groups(tblock: usize, k: usize) -> usize {
    tblock.div_ceil(k.max(1))
}

/// Data block indices of group `g`.
pub fn group_range(g: usize, tblock: usize, k: usize) -> std::ops::Range<usize> {
    let k = k.max(1);
    (g * k).min(tblock)..((g + 1) * k).min(tblock)
}

/// XORs `[len][data]` of one block into `acc` (grown as needed).
pub fn xor_block(acc: &mut Vec<u8>, data: &[u8]) {
    let need = 2 + data.len();
    if acc.len() < need {
        acc.resize(need, 0);
    }
    let len = (data.len() as u16).to_be_bytes();
    acc[0] ^= len[0];
    acc[1] ^= len[1];
    for (a, b) in acc[2..].iter_mut().zip(data) {
        *a ^= b;
    }
}

/// Recovers the one missing block from `parity` XOR the other blocks' `[len][data]`
/// (`parity` is consumed as the accumulator). `None` if the result is inconsistent.
pub fn recover(mut parity: Vec<u8>, others: &[&[u8]], max_len: usize) -> Option<Vec<u8>> {
    for o in others {
        xor_block(&mut parity, o);
    }
    if parity.len() < 2 {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([parity[0], parity[1]]));
    if len > max_len || 2 + len > parity.len() || parity[2 + len..].iter().any(|&b| b != 0) {
        return None;
    }
    parity.truncate(2 + len);
    parity.drain(..2);
    Some(parity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_missing_block_per_group_is_recovered() {
        let blocks: [&[u8]; 3] = [b"hello world", b"abc", b"0123456789abcdef"];
        let mut parity = Vec::new();
        for b in blocks {
            xor_block(&mut parity, b);
        }
        for missing in 0..3 {
            let others: Vec<&[u8]> = (0..3)
                .filter(|&i| i != missing)
                .map(|i| blocks[i])
                .collect();
            assert_eq!(
                recover(parity.clone(), &others, 64).unwrap(),
                blocks[missing]
            );
        }
        assert_eq!(groups(9, 4), 3);
        assert_eq!(group_range(2, 9, 4), 8..9);
    }
}
