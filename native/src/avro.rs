//! Avro binary values to Arrow buffers: the typed columns of a produce (FORMAT.md §17) without
//! a Python object per record or per field.
//!
//! Python gives a plan (the schema, reduced to what the typed columns hold: see
//! storage_layout/schemas/avro_native.py) and the payloads; each payload is decoded into
//! column builders, and one that is malformed (or has bytes left over) is rolled back and
//! reported, never a crash: the bytes are a producer's, untrusted.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// What a value of the schema is, as the typed column stores it.
pub enum Node {
    Boolean,
    /// An Avro int read into an int32 column (dates).
    Int32,
    /// An Avro int or long into an int64 column, times `scale` (timestamp-millis: 1000).
    Long(i64),
    Float,
    Double,
    Bytes,
    Utf8,
    Enum(Vec<Vec<u8>>),
    Fixed(usize),
    Record(Vec<Node>),
    Array(Box<Node>),
    Map(Box<Node>),
    /// A union of null (branch `null_index`) and one other type (the other branch).
    Nullable(i64, Box<Node>),
}

impl Node {
    pub fn from_plan(plan: &Bound<'_, PyAny>) -> PyResult<Node> {
        let parts: Bound<'_, PyTuple> = plan.cast::<PyTuple>()?.clone();
        let kind: String = parts.get_item(0)?.extract()?;
        let arg = |i: usize| parts.get_item(i);
        Ok(match kind.as_str() {
            "boolean" => Node::Boolean,
            "int32" => Node::Int32,
            "long" => Node::Long(arg(1)?.extract()?),
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes,
            "string" => Node::Utf8,
            "enum" => Node::Enum(arg(1)?.extract::<Vec<Vec<u8>>>()?),
            "fixed" => Node::Fixed(arg(1)?.extract()?),
            "record" => {
                let fields = arg(1)?;
                let list = fields.cast::<PyList>()?;
                let mut children = Vec::with_capacity(list.len());
                for child in list.iter() {
                    children.push(Node::from_plan(&child)?);
                }
                Node::Record(children)
            }
            "array" => Node::Array(Box::new(Node::from_plan(&arg(1)?)?)),
            "map" => Node::Map(Box::new(Node::from_plan(&arg(1)?)?)),
            "nullable" => Node::Nullable(arg(1)?.extract()?, Box::new(Node::from_plan(&arg(2)?)?)),
            other => return Err(PyValueError::new_err(format!("unknown plan node {other}"))),
        })
    }

    fn builder(&self) -> Col {
        match self {
            Node::Boolean => Col::Bool(Validity::default(), Bits::default()),
            Node::Int32 => Col::I32(Validity::default(), Vec::new()),
            Node::Long(_) => Col::I64(Validity::default(), Vec::new()),
            Node::Float | Node::Double => Col::F64(Validity::default(), Vec::new()),
            Node::Bytes | Node::Utf8 | Node::Enum(_) | Node::Fixed(_) => {
                Col::Bin(Validity::default(), vec![0], Vec::new())
            }
            Node::Record(fields) => Col::Struct(
                Validity::default(),
                fields.iter().map(Node::builder).collect(),
            ),
            Node::Array(item) => Col::List(Validity::default(), vec![0], Box::new(item.builder())),
            Node::Map(value) => Col::Map(
                Validity::default(),
                vec![0],
                Box::new(Col::Bin(Validity::default(), vec![0], Vec::new())),
                Box::new(value.builder()),
            ),
            Node::Nullable(_, inner) => inner.builder(),
        }
    }
}

#[derive(Default)]
struct Bits {
    bytes: Vec<u8>,
    len: usize,
}

impl Bits {
    fn push(&mut self, bit: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if bit {
            self.bytes[self.len / 8] |= 1 << (self.len % 8);
        } else {
            self.bytes[self.len / 8] &= !(1 << (self.len % 8));
        }
        self.len += 1;
    }

    fn truncate(&mut self, len: usize) {
        self.len = len;
        self.bytes.truncate(len.div_ceil(8));
    }
}

#[derive(Default)]
struct Validity {
    bits: Bits,
    nulls: usize,
}

impl Validity {
    fn push(&mut self, valid: bool) {
        self.bits.push(valid);
        if !valid {
            self.nulls += 1;
        }
    }
}

/// A column being built: validity, then the layout's own buffers and children.
enum Col {
    Bool(Validity, Bits),
    I32(Validity, Vec<i32>),
    I64(Validity, Vec<i64>),
    F64(Validity, Vec<f64>),
    Bin(Validity, Vec<i32>, Vec<u8>),
    Struct(Validity, Vec<Col>),
    List(Validity, Vec<i32>, Box<Col>),
    Map(Validity, Vec<i32>, Box<Col>, Box<Col>),
}

impl Col {
    fn validity(&mut self) -> &mut Validity {
        match self {
            Col::Bool(v, _)
            | Col::I32(v, _)
            | Col::I64(v, _)
            | Col::F64(v, _)
            | Col::Bin(v, _, _)
            | Col::Struct(v, _)
            | Col::List(v, _, _)
            | Col::Map(v, _, _, _) => v,
        }
    }

    fn validity_ref(&self) -> &Validity {
        match self {
            Col::Bool(v, _)
            | Col::I32(v, _)
            | Col::I64(v, _)
            | Col::F64(v, _)
            | Col::Bin(v, _, _)
            | Col::Struct(v, _)
            | Col::List(v, _, _)
            | Col::Map(v, _, _, _) => v,
        }
    }

    fn push_null(&mut self) {
        match self {
            Col::Bool(_, values) => values.push(false),
            Col::I32(_, values) => values.push(0),
            Col::I64(_, values) => values.push(0),
            Col::F64(_, values) => values.push(0.0),
            Col::Bin(_, offsets, _) | Col::List(_, offsets, _) | Col::Map(_, offsets, _, _) => {
                offsets.push(*offsets.last().unwrap_or(&0))
            }
            Col::Struct(_, children) => children.iter_mut().for_each(Col::push_null),
        }
        self.validity().push(false);
    }

    /// The lengths of every buffer, in a fixed order (for `truncate`).
    fn lengths(&self, out: &mut Vec<usize>) {
        let validity = self.validity_ref();
        let own = match self {
            Col::Bool(_, b) => [b.len, 0],
            Col::I32(_, x) => [x.len(), 0],
            Col::I64(_, x) => [x.len(), 0],
            Col::F64(_, x) => [x.len(), 0],
            Col::Bin(_, o, d) => [o.len(), d.len()],
            Col::Struct(_, _) => [0, 0],
            Col::List(_, o, _) | Col::Map(_, o, _, _) => [o.len(), 0],
        };
        out.extend([validity.bits.len, validity.nulls, own[0], own[1]]);
        match self {
            Col::Struct(_, children) => children.iter().for_each(|c| c.lengths(out)),
            Col::List(_, _, child) => child.lengths(out),
            Col::Map(_, _, keys, values) => {
                keys.lengths(out);
                values.lengths(out);
            }
            _ => {}
        }
    }

    fn truncate(&mut self, lengths: &mut std::slice::Iter<'_, usize>) {
        let mut take = [0usize; 4];
        for slot in take.iter_mut() {
            *slot = *lengths.next().expect("lengths of this column");
        }
        let [bits, nulls, first, second] = take;
        let validity = self.validity();
        validity.bits.truncate(bits);
        validity.nulls = nulls;
        match self {
            Col::Bool(_, b) => b.truncate(first),
            Col::I32(_, x) => x.truncate(first),
            Col::I64(_, x) => x.truncate(first),
            Col::F64(_, x) => x.truncate(first),
            Col::Bin(_, o, d) => {
                o.truncate(first);
                d.truncate(second);
            }
            Col::Struct(_, children) => children.iter_mut().for_each(|c| c.truncate(lengths)),
            Col::List(_, o, child) => {
                o.truncate(first);
                child.truncate(lengths);
            }
            Col::Map(_, o, keys, values) => {
                o.truncate(first);
                keys.truncate(lengths);
                values.truncate(lengths);
            }
        }
    }

    fn to_python<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let validity = self.validity_ref();
        let bitmap = (validity.nulls > 0).then(|| PyBytes::new(py, &validity.bits.bytes));
        let (buffers, children): (Vec<Bound<'py, PyBytes>>, Vec<Bound<'py, PyTuple>>) = match self {
            Col::Bool(_, b) => (vec![PyBytes::new(py, &b.bytes)], vec![]),
            Col::I32(_, x) => (
                vec![le_bytes(py, x.iter().flat_map(|v| v.to_le_bytes()))],
                vec![],
            ),
            Col::I64(_, x) => (
                vec![le_bytes(py, x.iter().flat_map(|v| v.to_le_bytes()))],
                vec![],
            ),
            Col::F64(_, x) => (
                vec![le_bytes(py, x.iter().flat_map(|v| v.to_le_bytes()))],
                vec![],
            ),
            Col::Bin(_, o, d) => (
                vec![
                    le_bytes(py, o.iter().flat_map(|v| v.to_le_bytes())),
                    PyBytes::new(py, d),
                ],
                vec![],
            ),
            Col::Struct(_, cs) => (
                vec![],
                cs.iter()
                    .map(|c| c.to_python(py))
                    .collect::<PyResult<_>>()?,
            ),
            Col::List(_, o, child) => (
                vec![le_bytes(py, o.iter().flat_map(|v| v.to_le_bytes()))],
                vec![child.to_python(py)?],
            ),
            Col::Map(_, o, keys, values) => (
                vec![le_bytes(py, o.iter().flat_map(|v| v.to_le_bytes()))],
                vec![keys.to_python(py)?, values.to_python(py)?],
            ),
        };
        (validity.bits.len, validity.nulls, bitmap, buffers, children).into_pyobject(py)
    }
}

fn le_bytes<'py>(py: Python<'py>, bytes: impl Iterator<Item = u8>) -> Bound<'py, PyBytes> {
    let collected: Vec<u8> = bytes.collect();
    PyBytes::new(py, &collected)
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| format!("truncated at byte {}", self.at))?;
        let slice = &self.data[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn long(&mut self) -> Result<i64, String> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self.take(1)?.first().expect("one byte");
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn length(&mut self) -> Result<usize, String> {
        let n = self.long()?;
        usize::try_from(n).map_err(|_| format!("negative length {n}"))
    }
}

/// Decode one value into `col`: exactly one entry (its value and validity) is pushed.
fn decode(node: &Node, col: &mut Col, r: &mut Reader<'_>) -> Result<(), String> {
    if let Node::Nullable(null_index, inner) = node {
        let branch = r.long()?;
        if branch == *null_index {
            col.push_null();
            return Ok(());
        }
        if branch != 1 - *null_index {
            return Err(format!("union branch {branch} out of range"));
        }
        return decode(inner, col, r);
    }
    decode_value(node, col, r)?;
    col.validity().push(true);
    Ok(())
}

fn decode_value(node: &Node, col: &mut Col, r: &mut Reader<'_>) -> Result<(), String> {
    match (node, col) {
        (Node::Boolean, Col::Bool(_, values)) => match r.take(1)?[0] {
            0 => values.push(false),
            1 => values.push(true),
            other => return Err(format!("boolean byte {other}")),
        },
        (Node::Int32, Col::I32(_, values)) => {
            let v = r.long()?;
            values.push(i32::try_from(v).map_err(|_| format!("int {v} out of range"))?);
        }
        (Node::Long(scale), Col::I64(_, values)) => {
            let v = r.long()?;
            values.push(v.checked_mul(*scale).ok_or("timestamp out of range")?);
        }
        (Node::Float, Col::F64(_, values)) => {
            let b = r.take(4)?;
            values.push(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
        }
        (Node::Double, Col::F64(_, values)) => {
            let b = r.take(8)?;
            values.push(f64::from_le_bytes(b.try_into().expect("8 bytes")));
        }
        (Node::Bytes | Node::Utf8, Col::Bin(_, offsets, data)) => {
            let n = r.length()?;
            let bytes = r.take(n)?;
            if matches!(node, Node::Utf8) {
                std::str::from_utf8(bytes).map_err(|_| "a string is not UTF-8".to_string())?;
            }
            push_binary(offsets, data, bytes)?;
        }
        (Node::Enum(symbols), Col::Bin(_, offsets, data)) => {
            let index = r.long()?;
            let symbol = usize::try_from(index).ok().and_then(|i| symbols.get(i));
            push_binary(offsets, data, symbol.ok_or(format!("enum index {index}"))?)?;
        }
        (Node::Fixed(size), Col::Bin(_, offsets, data)) => {
            let bytes = r.take(*size)?;
            push_binary(offsets, data, bytes)?;
        }
        (Node::Record(fields), Col::Struct(_, children)) => {
            for (field, child) in fields.iter().zip(children.iter_mut()) {
                decode(field, child, r)?;
            }
        }
        (Node::Array(item), Col::List(_, offsets, child)) => {
            let mut count = 0usize;
            blocks(r, |r| {
                count += 1;
                decode(item, child, r)
            })?;
            push_offset(offsets, count)?;
        }
        (Node::Map(value), Col::Map(_, offsets, keys, values)) => {
            let mut count = 0usize;
            blocks(r, |r| {
                count += 1;
                decode(&Node::Utf8, keys, r)?;
                decode(value, values, r)
            })?;
            push_offset(offsets, count)?;
        }
        _ => return Err("plan and column disagree".into()),
    }
    Ok(())
}

/// Avro's blocks of an array or map: a count (negative: then a byte size), items, until 0.
fn blocks(
    r: &mut Reader<'_>,
    mut item: impl FnMut(&mut Reader<'_>) -> Result<(), String>,
) -> Result<(), String> {
    loop {
        let mut count = r.long()?;
        if count == 0 {
            return Ok(());
        }
        if count < 0 {
            count = count.checked_neg().ok_or("bad block count")?;
            r.long()?; // the block's size in bytes
        }
        // Every item takes a byte or more (the planner refuses zero-width items), so a
        // count over the bytes left is a lie, refused before any item is built.
        let left = r.data.len() - r.at;
        if count as u64 > left as u64 {
            return Err(format!("block of {count} items in {left} bytes"));
        }
        for _ in 0..count {
            item(r)?;
        }
    }
}

fn push_offset(offsets: &mut Vec<i32>, count: usize) -> Result<(), String> {
    let last = *offsets.last().unwrap_or(&0);
    let next = i32::try_from(count).ok().and_then(|n| last.checked_add(n));
    offsets.push(next.ok_or("more items than a column holds")?);
    Ok(())
}

fn push_binary(offsets: &mut Vec<i32>, data: &mut Vec<u8>, bytes: &[u8]) -> Result<(), String> {
    data.extend_from_slice(bytes);
    offsets.push(i32::try_from(data.len()).map_err(|_| "column over 2 GiB".to_string())?);
    Ok(())
}

/// Decode each payload (from byte `skip`) with the plan into one column. Returns (column
/// tree, ok): a payload that is malformed or has bytes left over is null and its `ok` is 0.
#[pyfunction]
pub fn decode_avro<'py>(
    py: Python<'py>,
    plan: &Bound<'py, PyAny>,
    payloads: &Bound<'py, PyList>,
    skip: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let node = Node::from_plan(plan)?;
    let mut col = node.builder();
    let mut ok = Vec::with_capacity(payloads.len());
    let mut lengths = Vec::new();
    for payload in payloads.iter() {
        let bytes = payload.cast::<PyBytes>()?.as_bytes();
        lengths.clear();
        col.lengths(&mut lengths);
        let decoded = bytes
            .get(skip..)
            .ok_or("short")
            .map_err(String::from)
            .and_then(|data| {
                let mut reader = Reader { data, at: 0 };
                decode(&node, &mut col, &mut reader)?;
                if reader.at != data.len() {
                    return Err(format!("{} bytes left over", data.len() - reader.at));
                }
                Ok(())
            });
        match decoded {
            Ok(()) => ok.push(1u8),
            Err(_) => {
                col.truncate(&mut lengths.iter());
                col.push_null();
                ok.push(0u8);
            }
        }
    }
    (col.to_python(py)?, PyBytes::new(py, &ok)).into_pyobject(py)
}
