// The gateway's own REST API, called with the signed-in API key (if any). Nothing here is
// console-only: what the console shows, any client with the same key can read.
const CREDENTIALS_KEY = "lakelog.console.credentials";
const BINARY_V2 = "application/vnd.kafka.binary.v2+json";

export class ApiError extends Error {
  constructor(status, errorCode, message) {
    super(message);
    this.status = status;
    this.errorCode = errorCode;
  }
}

export function credentials() {
  return sessionStorage.getItem(CREDENTIALS_KEY);
}

// `key`: `<key_id>.<secret>`, as `lakelog api-keys create` prints it. Kept for this tab only.
export function signIn(key) {
  sessionStorage.setItem(CREDENTIALS_KEY, `Bearer ${key}`);
}

export function signOut() {
  sessionStorage.removeItem(CREDENTIALS_KEY);
}

// fetch() with the key; an error answer becomes an ApiError with the gateway's error_code.
export async function request(method, path, { body, accept, params } = {}) {
  const url = new URL(path, location.origin);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined) url.searchParams.set(name, value);
  }
  // No Basic challenge for the console's requests: the browser would pop up its own dialog.
  const headers = { "X-Requested-With": "lakelog-console" };
  if (credentials()) headers.Authorization = credentials();
  if (accept) headers.Accept = accept;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function errorOf(response) {
  let errorCode = response.status;
  let message = response.statusText;
  try {
    const body = await response.json();
    errorCode = body.error_code ?? errorCode;
    message = body.message ?? message;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, errorCode, message);
}

export async function getJson(path, options) {
  return (await request("GET", path, options)).json();
}

export async function sendJson(method, path, body) {
  const response = await request(method, path, { body });
  return response.status === 204 ? null : response.json();
}

let clusterId = null;

// `/v3/clusters/<id>`: the one cluster this gateway serves.
export async function v3() {
  if (clusterId === null) {
    const clusters = await getJson("/v3/clusters");
    clusterId = clusters.data[0].cluster_id;
  }
  return `/v3/clusters/${encodeURIComponent(clusterId)}`;
}

// Up to `limit` promises at once (a topic with many partitions is many small requests).
export async function mapLimited(items, limit, task) {
  const results = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const index = next++;
      results[index] = await task(items[index]);
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

export async function fetchRecords(topic, partition, offset, maxBytes) {
  const path = `/topics/${encodeURIComponent(topic)}/partitions/${partition}/records`;
  const response = await request("GET", path, {
    accept: BINARY_V2,
    params: { offset, max_bytes: maxBytes, decode: "schemas" },
  });
  const nextOffset = response.headers.get("x-lakelog-next-offset");
  return { records: await response.json(), nextOffset: nextOffset === null ? null : +nextOffset };
}
