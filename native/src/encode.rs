//! Arrow columns of a fetch as the records section of one RecordBatch v2 (uncompressed);
//! the caller writes the batch header and CRC around it.

use crate::columns::{i32_at, i64_at, is_valid, BinaryView};
use crate::varint;

/// The headers column: list<struct<key: string, value: binary>>, children unsliced.
pub struct HeadersView<'a> {
    pub offset: usize,
    pub validity: Option<&'a [u8]>,
    pub offsets: &'a [u8],
    pub keys: BinaryView<'a>,
    pub values: BinaryView<'a>,
}

/// Rows [start, stop) of the fetched columns.
pub struct RecordsView<'a> {
    pub offsets: &'a [u8],
    pub offsets_at: usize,
    pub timestamps_us: &'a [u8],
    pub timestamps_at: usize,
    pub keys: BinaryView<'a>,
    pub values: BinaryView<'a>,
    pub headers: HeadersView<'a>,
}

/// What the batch header needs besides the body.
pub struct EncodedBody {
    pub body: Vec<u8>,
    pub base_offset: i64,
    pub last_offset: i64,
    pub base_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
}

pub fn encode(records: &RecordsView, start: usize, stop: usize) -> Result<EncodedBody, String> {
    if start >= stop {
        return Err("no rows to encode".to_string());
    }
    let base_offset = i64_at(records.offsets, records.offsets_at + start)?;
    let base_timestamp_ms = timestamp_ms(records, start)?;
    let mut encoded = EncodedBody {
        body: Vec::with_capacity(estimate_bytes(records, start, stop)),
        base_offset,
        last_offset: base_offset,
        base_timestamp_ms,
        max_timestamp_ms: base_timestamp_ms,
    };
    let mut record = Vec::with_capacity(256);
    for row in start..stop {
        let offset = i64_at(records.offsets, records.offsets_at + row)?;
        let timestamp = timestamp_ms(records, row)?;
        record.clear();
        record.push(0); // attributes
        varint::write(&mut record, timestamp - base_timestamp_ms);
        varint::write(&mut record, offset - base_offset);
        write_bytes(&mut record, records.keys.get(row)?);
        write_bytes(&mut record, records.values.get(row)?);
        write_headers(&mut record, &records.headers, row)?;
        varint::write(&mut encoded.body, record.len() as i64);
        encoded.body.extend_from_slice(&record);
        encoded.last_offset = offset;
        encoded.max_timestamp_ms = encoded.max_timestamp_ms.max(timestamp);
    }
    Ok(encoded)
}

fn timestamp_ms(records: &RecordsView, row: usize) -> Result<i64, String> {
    Ok(i64_at(records.timestamps_us, records.timestamps_at + row)?.div_euclid(1000))
}

fn estimate_bytes(records: &RecordsView, start: usize, stop: usize) -> usize {
    let payload = records.values.data.len() + records.keys.data.len();
    let share = payload / (records.offsets.len() / 8).max(1) * (stop - start);
    share + (stop - start) * 16
}

fn write_headers(record: &mut Vec<u8>, headers: &HeadersView, row: usize) -> Result<(), String> {
    let index = headers.offset + row;
    if !is_valid(headers.validity, index) {
        varint::write(record, 0);
        return Ok(());
    }
    let first = i32_at(headers.offsets, index)?;
    let end = i32_at(headers.offsets, index + 1)?;
    if first < 0 || end < first {
        return Err(format!("header list offsets {first}..{end} are not a range"));
    }
    varint::write(record, i64::from(end - first));
    for child in first as usize..end as usize {
        // A null header key cannot be sent (Kafka's clients refuse it): write it empty.
        write_bytes(record, Some(headers.keys.get(child)?.unwrap_or_default()));
        write_bytes(record, headers.values.get(child)?);
    }
    Ok(())
}

fn write_bytes(record: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => varint::write(record, -1),
        Some(bytes) => {
            varint::write(record, bytes.len() as i64);
            record.extend_from_slice(bytes);
        }
    }
}
