// The message browser: one partition from an offset, a timestamp or the newest records, with
// keys, values and headers shown as JSON, text or hex; a key or value that names a registered
// schema is shown decoded (the gateway decodes it: `decode=schemas`) unless text or hex is
// asked for.
import { fetchRecords, getJson } from "./api.js";
import { formatCount, formatTime, h, link, table } from "./dom.js";
import { partitionsOf } from "./topics.js";

const FETCH_BYTES_MAX = 1024 * 1024;
const FORMATS = ["auto", "json", "text", "hex"];
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

export function decodeBase64(text) {
  if (text === null || text === undefined) return null;
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join(" ");
}

function utf8(bytes) {
  try {
    return strictUtf8.decode(bytes);
  } catch {
    return null;
  }
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return null;
  }
}

// What a key, value or header value looks like in `format` (null: no bytes at all).
export function show(bytes, format) {
  if (bytes === null) return null;
  const text = utf8(bytes);
  if (format === "hex" || text === null) return hex(bytes);
  if (format === "text") return text;
  return prettyJson(text) ?? (format === "json" ? `(not JSON) ${text}` : text);
}

function render(bytes, format, schemaId, decoded) {
  if (schemaId !== undefined && (format === "auto" || format === "json")) {
    return h("div", {},
      h("div", { class: "tag schema" }, `schema ${schemaId}`),
      h("pre", {}, JSON.stringify(decoded, null, 2)));
  }
  const shown = show(bytes, format);
  return shown === null ? h("span", { class: "muted" }, "null") : h("pre", {}, shown);
}

function headerTag(header, format) {
  return h("div", { class: "tag" }, `${header.key}: ${show(decodeBase64(header.value), format) ?? "null"}`);
}

async function startOffset(topic, partition, query, bounds) {
  const timestamp = query.get("timestamp");
  if (timestamp) {
    const path = `/topics/${encodeURIComponent(topic)}/partitions/${partition}/offsets`;
    const found = await getJson(path, { params: { timestamp } });
    return found.timestamp_offset ?? bounds.highWatermark;
  }
  if (query.get("offset") !== null && query.get("offset") !== "") return +query.get("offset");
  return Math.max(bounds.logStart, bounds.highWatermark - +(query.get("count") || 20));
}

export async function messagesPage(main, topic, query) {
  const partitions = await partitionsOf(topic);
  const partition = +(query.get("partition") || 0);
  const bounds = partitions.find((p) => p.partition === partition) || partitions[0];
  const format = FORMATS.includes(query.get("format")) ? query.get("format") : "auto";
  const count = Math.max(1, Math.min(500, +(query.get("count") || 20)));
  const from = await startOffset(topic, bounds.partition, query, bounds);
  const fetched = from < bounds.highWatermark
    ? await fetchRecords(topic, bounds.partition, from, FETCH_BYTES_MAX)
    : { records: [], nextOffset: from };
  const records = fetched.records.slice(0, count);
  const go = (changes) => {
    const next = new URLSearchParams({ partition: bounds.partition, format, count });
    for (const [name, value] of Object.entries(changes)) next.set(name, value);
    location.hash = `#/topics/${encodeURIComponent(topic)}/messages?${next}`;
  };
  const rows = records.map((r) => [
    String(r.offset),
    formatTime(r.timestamp),
    render(decodeBase64(r.key), format, r.key_schema_id, r.key_decoded),
    render(decodeBase64(r.value), format, r.value_schema_id, r.value_decoded),
    (r.headers || []).map((header) => headerTag(header, format)),
  ]);
  const last = records.length ? records[records.length - 1].offset + 1 : fetched.nextOffset ?? from;
  main.replaceChildren(
    h("h1", {}, "Messages of ", link(`#/topics/${encodeURIComponent(topic)}`, topic)),
    controls(partitions, bounds.partition, format, count, from, go),
    h("p", { class: "muted", id: "range" },
      `Partition ${bounds.partition}: offsets ${formatCount(bounds.logStart)} to `
      + `${formatCount(bounds.highWatermark - 1)}; showing ${records.length} from ${from}.`),
    table(["Offset #", "Timestamp", "Key", "Value", "Headers"], rows, { id: "messages" }),
    h("div", { class: "toolbar" },
      h("button", { class: "plain", onclick: () => go({ offset: Math.max(bounds.logStart, from - count) }) },
        "← Older"),
      h("button", { class: "plain", id: "newer", onclick: () => go({ offset: last }) }, "Newer →")),
  );
}

function controls(partitions, partition, format, count, from, go) {
  const partitionSelect = h("select", { name: "partition" },
    partitions.map((p) => h("option", { value: p.partition, selected: p.partition === partition },
      `${p.partition}`)));
  const offset = h("input", { name: "offset", type: "number", min: 0, value: from, size: 10 });
  const timestamp = h("input", { name: "timestamp", type: "datetime-local", step: 1 });
  const formatSelect = h("select", { name: "format" },
    FORMATS.map((f) => h("option", { value: f, selected: f === format }, f)));
  const countInput = h("input", { name: "count", type: "number", min: 1, max: 500, value: count });
  const base = () => ({
    partition: partitionSelect.value, format: formatSelect.value, count: countInput.value,
  });
  const byOffset = (event) => {
    event.preventDefault();
    go({ ...base(), offset: offset.value });
  };
  const byTimestamp = () => {
    if (timestamp.value) go({ ...base(), timestamp: new Date(timestamp.value).getTime() });
  };
  const newest = () => go({ ...base(), offset: "" });
  return h("form", { class: "toolbar", id: "seek", onsubmit: byOffset },
    h("label", {}, "Partition", partitionSelect),
    h("label", {}, "Offset", offset),
    h("button", { type: "submit" }, "Seek to offset"),
    h("label", {}, "Timestamp (local time)", timestamp),
    h("button", { type: "button", onclick: byTimestamp }, "Seek to time"),
    h("button", { type: "button", class: "plain", onclick: newest }, "Newest"),
    h("label", {}, "Show as", formatSelect),
    h("label", {}, "Records", countInput));
}
