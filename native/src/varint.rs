//! Kafka's zigzag varints (protobuf's encoding): records use them for every length and delta.

/// Why a varint could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum VarintError {
    /// The data ends inside the varint.
    Truncated,
    /// More than ten bytes: no 64-bit value is that long.
    TooLong,
}

/// The zigzag varint at `*position`, advancing `*position` past it.
#[inline]
pub fn read(data: &[u8], position: &mut usize) -> Result<i64, VarintError> {
    let mut raw: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *data.get(*position).ok_or(VarintError::Truncated)?;
        *position += 1;
        raw |= u64::from(byte & 0x7F).wrapping_shl(shift);
        if byte < 0x80 {
            return Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
        shift += 7;
        if shift > 63 {
            return Err(VarintError::TooLong);
        }
    }
}

/// Append `value` as a zigzag varint.
#[inline]
pub fn write(out: &mut Vec<u8>, value: i64) {
    let mut encoded = ((value << 1) ^ (value >> 63)) as u64;
    while encoded >= 0x80 {
        out.push((encoded as u8 & 0x7F) | 0x80);
        encoded >>= 7;
    }
    out.push(encoded as u8);
}
