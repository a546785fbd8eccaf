//! Arrow's memory layout, built by hand: a validity bitmap (bit set = valid, least significant
//! bit first), int32 offsets, and the values (https://arrow.apache.org/docs/format/Columnar.html).

/// Bits of an Arrow validity bitmap, with the count of nulls.
pub struct Validity {
    bits: Vec<u8>,
    len: usize,
    pub null_count: usize,
}

impl Validity {
    fn with_capacity(capacity: usize) -> Self {
        Validity { bits: Vec::with_capacity(capacity.div_ceil(8)), len: 0, null_count: 0 }
    }

    fn push(&mut self, valid: bool) {
        if self.len % 8 == 0 {
            self.bits.push(0);
        }
        if valid {
            *self.bits.last_mut().unwrap() |= 1 << (self.len % 8);
        } else {
            self.null_count += 1;
        }
        self.len += 1;
    }

    /// The bitmap, or None when nothing is null (Arrow's way to say "all valid").
    pub fn bitmap(&self) -> Option<&[u8]> {
        (self.null_count > 0).then_some(&self.bits[..])
    }
}

/// A binary (or UTF-8 string) column.
pub struct BinaryColumn {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub validity: Validity,
}

impl BinaryColumn {
    pub fn with_capacity(rows: usize, bytes: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        BinaryColumn { offsets, data: Vec::with_capacity(bytes), validity: Validity::with_capacity(rows) }
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Append a value (None: null); the bytes it adds.
    pub fn push(&mut self, value: Option<&[u8]>) -> usize {
        let added = value.map_or(0, |bytes| bytes.len());
        if let Some(bytes) = value {
            self.data.extend_from_slice(bytes);
        }
        // Offsets fit: a record set is bounded by the request size, far below 2 GiB.
        self.offsets.push(self.data.len() as i32);
        self.validity.push(value.is_some());
        added
    }
}

/// A list column's offsets into its child, and which lists are null.
pub struct ListColumn {
    pub offsets: Vec<i32>,
    pub validity: Validity,
}

impl ListColumn {
    pub fn with_capacity(rows: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        ListColumn { offsets, validity: Validity::with_capacity(rows) }
    }

    /// End the current list at child position `child_end`.
    pub fn push(&mut self, child_end: usize) {
        self.offsets.push(child_end as i32);
        self.validity.push(true);
    }

    pub fn push_null(&mut self) {
        let last = *self.offsets.last().unwrap();
        self.offsets.push(last);
        self.validity.push(false);
    }
}

/// Read-only views of Arrow arrays handed over from Python, with their slice offsets.
pub struct BinaryView<'a> {
    pub offset: usize,
    pub validity: Option<&'a [u8]>,
    pub offsets: &'a [u8],
    pub data: &'a [u8],
}

impl<'a> BinaryView<'a> {
    /// Value `row` of the (sliced) array, or None when null.
    pub fn get(&self, row: usize) -> Result<Option<&'a [u8]>, String> {
        let index = self.offset + row;
        if !is_valid(self.validity, index) {
            return Ok(None);
        }
        let start = i32_at(self.offsets, index)?;
        let end = i32_at(self.offsets, index + 1)?;
        if start < 0 || end < start || end as usize > self.data.len() {
            return Err(format!("binary offsets {start}..{end} do not fit the data"));
        }
        Ok(Some(&self.data[start as usize..end as usize]))
    }
}

pub fn is_valid(bitmap: Option<&[u8]>, index: usize) -> bool {
    bitmap.is_none_or(|bits| bits.get(index / 8).is_some_and(|byte| byte & (1 << (index % 8)) != 0))
}

pub fn i32_at(buffer: &[u8], index: usize) -> Result<i32, String> {
    let bytes = buffer.get(index * 4..index * 4 + 4).ok_or("an offset lies past its buffer")?;
    Ok(i32::from_le_bytes(bytes.try_into().unwrap()))
}

pub fn i64_at(buffer: &[u8], index: usize) -> Result<i64, String> {
    let bytes = buffer.get(index * 8..index * 8 + 8).ok_or("a value lies past its buffer")?;
    Ok(i64::from_le_bytes(bytes.try_into().unwrap()))
}
