//! lakelog's Kafka record-set codec: the per-record work of Produce and Fetch, in Rust.
//!
//! Python keeps the batch framing, CRC and compression (api/kafka/codec.py); this module turns
//! a batch's records section into Arrow column buffers, and Arrow columns back into one, so
//! no Python object is made per record. Inputs are untrusted network bytes: every read is
//! bounds-checked and a bad record is a ValueError, never a crash.

use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

mod avro;
mod columns;
mod decode;
mod encode;
mod parquet_file;
mod varint;

use columns::{BinaryColumn, BinaryView};
use encode::{HeadersView, RecordsView};

// Arrow buffers are little-endian; so are the Vecs copied into them below.
const _: () = assert!(cfg!(target_endian = "little"));

/// Decode `count` records of a (decompressed) records section.
///
/// Returns (size_bytes, timestamps_ms, keys, values, headers, key_schema_ids,
/// value_schema_ids): timestamps as int64 bytes; keys and values as (offsets, data, validity
/// or None, null_count); headers as (list_offsets, list_validity or None, list_null_count,
/// header_keys, header_values); the distinct schema ids keys and values name by Confluent's
/// wire-format prefix (a list, or None when there were too many to list).
#[pyfunction]
fn decode_records<'py>(
    py: Python<'py>,
    body: &Bound<'py, PyAny>,
    count: usize,
    base_timestamp_ms: i64,
) -> PyResult<Bound<'py, PyTuple>> {
    let buffer = RawBuffer::new(body)?;
    let decoded =
        decode::decode(buffer.bytes(), count, base_timestamp_ms).map_err(PyValueError::new_err)?;
    let headers = (
        vec_bytes(py, &decoded.headers.offsets),
        decoded.headers.validity.bitmap().map(|bits| PyBytes::new(py, bits)),
        decoded.headers.validity.null_count,
        binary_tuple(py, &decoded.header_keys)?,
        binary_tuple(py, &decoded.header_values)?,
    );
    (
        decoded.size_bytes,
        vec_bytes(py, &decoded.timestamps_ms),
        binary_tuple(py, &decoded.keys)?,
        binary_tuple(py, &decoded.values)?,
        headers,
        decoded.key_schema_ids.listed(),
        decoded.value_schema_ids.listed(),
    )
        .into_pyobject(py)
}

/// Encode rows [start, stop) of a fetch's columns as one uncompressed records section.
///
/// Each column comes as Arrow buffers with its slice offset: `offsets` and `timestamps_us`
/// as (offset, int64 values); keys and values as (offset, validity, offsets, data); headers as
/// (offset, validity, list_offsets, keys, values) with unsliced children. Returns
/// (body, base_offset, last_offset, base_timestamp_ms, max_timestamp_ms).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn encode_records<'py>(
    py: Python<'py>,
    offsets: (usize, Bound<'py, PyAny>),
    timestamps_us: (usize, Bound<'py, PyAny>),
    keys: BinaryArgs<'py>,
    values: BinaryArgs<'py>,
    headers: (usize, Option<Bound<'py, PyAny>>, Bound<'py, PyAny>, BinaryArgs<'py>, BinaryArgs<'py>),
    start: usize,
    stop: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let offsets_buffer = RawBuffer::new(&offsets.1)?;
    let timestamps_buffer = RawBuffer::new(&timestamps_us.1)?;
    let key_buffers = BinaryBuffers::new(&keys)?;
    let value_buffers = BinaryBuffers::new(&values)?;
    let header_validity = headers.1.as_ref().map(RawBuffer::new).transpose()?;
    let header_offsets = RawBuffer::new(&headers.2)?;
    let header_keys = BinaryBuffers::new(&headers.3)?;
    let header_values = BinaryBuffers::new(&headers.4)?;
    let view = RecordsView {
        offsets: offsets_buffer.bytes(),
        offsets_at: offsets.0,
        timestamps_us: timestamps_buffer.bytes(),
        timestamps_at: timestamps_us.0,
        keys: key_buffers.view(),
        values: value_buffers.view(),
        headers: HeadersView {
            offset: headers.0,
            validity: header_validity.as_ref().map(RawBuffer::bytes),
            offsets: header_offsets.bytes(),
            keys: header_keys.view(),
            values: header_values.view(),
        },
    };
    let encoded = encode::encode(&view, start, stop).map_err(PyValueError::new_err)?;
    (
        PyBytes::new(py, &encoded.body),
        encoded.base_offset,
        encoded.last_offset,
        encoded.base_timestamp_ms,
        encoded.max_timestamp_ms,
    )
        .into_pyobject(py)
}

/// (offset, validity or None, offsets, data) of an Arrow binary or string array.
type BinaryArgs<'py> = (usize, Option<Bound<'py, PyAny>>, Bound<'py, PyAny>, Bound<'py, PyAny>);

struct BinaryBuffers {
    offset: usize,
    validity: Option<RawBuffer>,
    offsets: RawBuffer,
    data: RawBuffer,
}

impl BinaryBuffers {
    fn new(args: &BinaryArgs) -> PyResult<Self> {
        Ok(BinaryBuffers {
            offset: args.0,
            validity: args.1.as_ref().map(RawBuffer::new).transpose()?,
            offsets: RawBuffer::new(&args.2)?,
            data: RawBuffer::new(&args.3)?,
        })
    }

    fn view(&self) -> BinaryView<'_> {
        BinaryView {
            offset: self.offset,
            validity: self.validity.as_ref().map(RawBuffer::bytes),
            offsets: self.offsets.bytes(),
            data: self.data.bytes(),
        }
    }
}

fn binary_tuple<'py>(py: Python<'py>, column: &BinaryColumn) -> PyResult<Bound<'py, PyTuple>> {
    (
        vec_bytes(py, &column.offsets),
        PyBytes::new(py, &column.data),
        column.validity.bitmap().map(|bits| PyBytes::new(py, bits)),
        column.validity.null_count,
    )
        .into_pyobject(py)
}

fn vec_bytes<'py, T: Copy>(py: Python<'py>, values: &[T]) -> Bound<'py, PyBytes> {
    // SAFETY: i32/i64 have no padding; a plain-old-data slice viewed as its bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
    };
    PyBytes::new(py, bytes)
}

/// Any object with the buffer protocol (bytes, memoryview, pyarrow.Buffer) as plain bytes:
/// pyo3's typed PyBuffer would refuse pyarrow's signed-char format.
struct RawBuffer {
    view: Box<ffi::Py_buffer>,
}

impl RawBuffer {
    fn new(object: &Bound<PyAny>) -> PyResult<Self> {
        // SAFETY: a zeroed Py_buffer is the documented initial state for PyObject_GetBuffer.
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        let status = unsafe { ffi::PyObject_GetBuffer(object.as_ptr(), &mut *view, ffi::PyBUF_SIMPLE) };
        if status != 0 {
            return Err(PyErr::fetch(object.py()));
        }
        Ok(RawBuffer { view })
    }

    fn bytes(&self) -> &[u8] {
        if self.view.len <= 0 || self.view.buf.is_null() {
            return &[];
        }
        // SAFETY: PyBUF_SIMPLE gives `len` contiguous bytes at `buf`, held until release.
        unsafe { std::slice::from_raw_parts(self.view.buf as *const u8, self.view.len as usize) }
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        // Dropped inside the pyfunction that made it, with the GIL held.
        unsafe { ffi::PyBuffer_Release(&mut *self.view) }
    }
}

#[pymodule]
fn lakelog_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(decode_records, module)?)?;
    module.add_function(wrap_pyfunction!(encode_records, module)?)?;
    module.add_function(wrap_pyfunction!(avro::decode_avro, module)?)?;
    module.add_function(wrap_pyfunction!(parquet_file::write_parquet, module)?)?;
    Ok(())
}
