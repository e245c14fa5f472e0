//! Bounds-checked little-endian reads at byte offsets.
//!
//! Every read returns `None` instead of panicking when the range does not fit
//! in the slice, including when `at + N` would overflow.

/// `N` bytes starting at `at`, if they are all inside `data`.
pub(crate) fn array_at<const N: usize>(data: &[u8], at: usize) -> Option<[u8; N]> {
    let end = at.checked_add(N)?;
    data.get(at..end)?.try_into().ok()
}

/// Little-endian `u16` at `at`.
pub(crate) fn u16_at(data: &[u8], at: usize) -> Option<u16> {
    array_at(data, at).map(u16::from_le_bytes)
}

/// Little-endian `u32` at `at`.
pub(crate) fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    array_at(data, at).map(u32::from_le_bytes)
}

/// Little-endian `i32` at `at`.
pub(crate) fn i32_at(data: &[u8], at: usize) -> Option<i32> {
    array_at(data, at).map(i32::from_le_bytes)
}

/// Little-endian `u64` at `at`.
pub(crate) fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    array_at(data, at).map(u64::from_le_bytes)
}

/// Little-endian `i64` at `at`.
pub(crate) fn i64_at(data: &[u8], at: usize) -> Option<i64> {
    array_at(data, at).map(i64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_and_refuses_out_of_range() {
        let data = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09];
        assert_eq!(u16_at(&data, 0), Some(0x0201));
        assert_eq!(u32_at(&data, 1), Some(0x0504_0302));
        assert_eq!(u64_at(&data, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(i32_at(&[0xff, 0xff, 0xff, 0xff], 0), Some(-1));
        assert_eq!(i64_at(&[0xfe; 8], 0), Some(i64::from_le_bytes([0xfe; 8])));
        assert_eq!(u64_at(&data, 2), None);
        assert_eq!(u16_at(&data, 8), None);
        assert_eq!(u32_at(&data, usize::MAX), None);
    }
}
