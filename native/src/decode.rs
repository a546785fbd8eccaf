//! The records section of a RecordBatch v2 (already decompressed) as Arrow column buffers.
//!
//! Each record: length, attributes, timestampDelta, offsetDelta, key, value, headers
//! (https://kafka.apache.org/documentation/#record). The checks are the ones lakelog's Python
//! reference decoder makes (api/kafka/codec.py), so both refuse the same inputs.

use crate::columns::{BinaryColumn, ListColumn};
use crate::varint::{self, VarintError};

/// The smallest record: length byte excluded, attributes, three one-byte varints and a
/// one-byte key and value length of -1 and a header count of 0.
const MIN_RECORD_LENGTH: i64 = 6;
/// Timestamps become Arrow microseconds: a millisecond value beyond this overflows int64.
const TIMESTAMP_MS_LIMIT: i64 = i64::MAX / 1000;

/// A produce request's records, column by column (nulls as Arrow validity bitmaps).
pub struct DecodedRecords {
    pub timestamps_ms: Vec<i64>,
    pub keys: BinaryColumn,
    pub values: BinaryColumn,
    /// A record without headers has a null list (as the Python decoder gives None).
    pub headers: ListColumn,
    pub header_keys: BinaryColumn,
    pub header_values: BinaryColumn,
    /// Key, value, header key and header value bytes, as Kafka counts a batch's size.
    pub size_bytes: u64,
    /// The schema ids the keys and the values name by Confluent's wire-format prefix (a zero
    /// byte and a 4-byte id): only those can a record without headers name.
    pub key_schema_ids: SchemaIds,
    pub value_schema_ids: SchemaIds,
}

/// Confluent's wire-format prefix: the magic byte 0 and a 4-byte schema id (the rule
/// storage_layout/schemas/wire.py `from_prefix` reads; keep the two alike).
const SCHEMA_PREFIX_BYTES: usize = 5;
/// Distinct ids listed per column; past this many the column's are not listed at all (a
/// batch of 10 000 random values names ~40: listed, they cost no pass over the column).
const SCHEMA_IDS_LISTED_MAX: usize = 64;

/// The distinct schema ids one column's prefixes name, in order of first sight.
#[derive(Default)]
pub struct SchemaIds {
    ids: Vec<u32>,
    overflowed: bool,
}

impl SchemaIds {
    fn note(&mut self, bytes: Option<&[u8]>) {
        let Some(b) = bytes else { return };
        if b.len() < SCHEMA_PREFIX_BYTES || b[0] != 0 || self.overflowed {
            return;
        }
        let id = u32::from_be_bytes([b[1], b[2], b[3], b[4]]);
        if self.ids.contains(&id) {
            return;
        }
        if self.ids.len() == SCHEMA_IDS_LISTED_MAX {
            self.overflowed = true;
        } else {
            self.ids.push(id);
        }
    }

    /// The ids, or None when there were too many to list.
    pub fn listed(&self) -> Option<&[u32]> {
        (!self.overflowed).then_some(self.ids.as_slice())
    }
}

pub fn decode(data: &[u8], count: usize, base_timestamp_ms: i64) -> Result<DecodedRecords, String> {
    // A record takes at least 7 bytes: a hostile count cannot make us reserve more than that.
    let capacity = count.min(data.len() / 7 + 1);
    let mut decoded = DecodedRecords {
        timestamps_ms: Vec::with_capacity(capacity),
        keys: BinaryColumn::with_capacity(capacity, data.len()),
        values: BinaryColumn::with_capacity(capacity, data.len()),
        headers: ListColumn::with_capacity(capacity),
        header_keys: BinaryColumn::with_capacity(0, 0),
        header_values: BinaryColumn::with_capacity(0, 0),
        size_bytes: 0,
        key_schema_ids: SchemaIds::default(),
        value_schema_ids: SchemaIds::default(),
    };
    let mut position = 0usize;
    for _ in 0..count {
        position = decode_record(data, position, base_timestamp_ms, &mut decoded)?;
    }
    if position != data.len() {
        return Err(format!(
            "{} bytes after the last of {count} records",
            data.len() - position
        ));
    }
    Ok(decoded)
}

fn decode_record(
    data: &[u8],
    start: usize,
    base_timestamp_ms: i64,
    out: &mut DecodedRecords,
) -> Result<usize, String> {
    let mut position = start;
    let length = read_varint(data, &mut position)?;
    let record_end = position as i64 + length;
    if length < MIN_RECORD_LENGTH || record_end > data.len() as i64 {
        return Err(format!("record length {length} does not fit the batch"));
    }
    let record = &data[..record_end as usize];
    position += 1; // attributes: unused in v2
    let timestamp_delta = read_varint(record, &mut position)?;
    read_varint(record, &mut position)?; // offsetDelta: the record's place in the batch decides
    let timestamp_ms = base_timestamp_ms
        .checked_add(timestamp_delta)
        .filter(|ms| ms.abs() <= TIMESTAMP_MS_LIMIT)
        .ok_or_else(|| "a record timestamp is out of range".to_string())?;
    out.timestamps_ms.push(timestamp_ms);
    let key = read_bytes(record, &mut position)?;
    out.size_bytes += out.keys.push(key) as u64;
    let value = read_bytes(record, &mut position)?;
    out.size_bytes += out.values.push(value) as u64;
    out.key_schema_ids.note(key);
    out.value_schema_ids.note(value);
    let header_count = read_varint(record, &mut position)?;
    if header_count < 0 {
        return Err(format!("record header count {header_count} is negative"));
    }
    if header_count == 0 {
        out.headers.push_null();
    } else {
        for _ in 0..header_count {
            out.size_bytes += read_header(record, &mut position, out)? as u64;
        }
        out.headers.push(out.header_keys.len());
    }
    if position != record.len() {
        return Err("a record's fields do not add up to its length".to_string());
    }
    Ok(position)
}

fn read_header(record: &[u8], position: &mut usize, out: &mut DecodedRecords) -> Result<usize, String> {
    let name = read_bytes(record, position)?
        .ok_or_else(|| "a record header has a null key".to_string())?;
    // Java's clients decode header keys leniently (new String(bytes, UTF_8)); so do we.
    let name = String::from_utf8_lossy(name);
    let value = read_bytes(record, position)?;
    Ok(out.header_keys.push(Some(name.as_bytes())) + out.header_values.push(value))
}

fn read_varint(data: &[u8], position: &mut usize) -> Result<i64, String> {
    varint::read(data, position).map_err(|error| match error {
        VarintError::Truncated => "the records end before the batch says".to_string(),
        VarintError::TooLong => "a varint is longer than 10 bytes".to_string(),
    })
}

/// A length-prefixed byte string; a negative length is null (as Kafka's clients read it).
fn read_bytes<'a>(record: &'a [u8], position: &mut usize) -> Result<Option<&'a [u8]>, String> {
    let length = read_varint(record, position)?;
    if length < 0 {
        return Ok(None);
    }
    let end = (*position as i64).saturating_add(length);
    if end > record.len() as i64 {
        return Err("a key, value or header runs past its record".to_string());
    }
    let bytes = &record[*position..end as usize];
    *position = end as usize;
    Ok(Some(bytes))
}
