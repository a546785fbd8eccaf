// Nodes and the partitions each leads; this node's scheduled maintenance and its recent runs.
import { getJson, mapLimited, v3 } from "./api.js";
import { formatBytes, formatCount, formatTime, h, table, tags } from "./dom.js";

const RUNS_SHOWN_MAX = 50;

export async function nodesPage(main) {
  const base = await v3();
  const [brokers, topics] = await Promise.all([
    getJson(`${base}/brokers`).then((b) => b.data),
    getJson(`${base}/topics`).then((t) => t.data),
  ]);
  const partitions = await mapLimited(topics, 4, (t) =>
    getJson(`/topics/${encodeURIComponent(t.topic_name)}/partitions`).then((list) =>
      list.map((p) => ({ topic: t.topic_name, partition: p.partition, leader: p.leader }))));
  const led = new Map(brokers.map((b) => [b.broker_id, []]));
  for (const p of partitions.flat()) {
    if (!led.has(p.leader)) led.set(p.leader, []);
    led.get(p.leader).push(p);
  }
  const rows = [...led.entries()].sort(([a], [b]) => a - b).map(([node, list]) => {
    const broker = brokers.find((b) => b.broker_id === node);
    return [
      String(node),
      broker ? `${broker.host}:${broker.port}` : "(not live: its partitions move)",
      formatCount(list.length),
      tags(list.map((p) => `${p.topic}-${p.partition}`)),
    ];
  });
  main.replaceChildren(
    h("h1", {}, "Nodes"),
    h("p", { class: "muted" }, "Live gateway nodes sharing this storage root, and the "
      + "partitions each leads (writes one at a time)."),
    table(["Node #", "Address", "Partitions led #", "Partitions"], rows, { id: "nodes" }),
  );
}

function runRows(runs) {
  return runs.slice(0, RUNS_SHOWN_MAX).map((run) => [
    formatTime(run.finished_ms),
    run.job,
    `${run.topic}-${run.partition}`,
    run.error ? `failed: ${run.error}` : run.committed ? "committed" : "nothing to do",
    formatCount(run.records_removed),
    formatBytes(run.bytes_removed),
    formatCount(run.files_deleted),
  ]);
}

const RUN_COLUMNS = ["Finished", "Job", "Partition", "Outcome", "Records removed #",
  "Bytes removed #", "Files deleted #"];

// `?all=1`: every run, those with nothing to do too (by default: changes and failures only).
export async function maintenancePage(main, query) {
  const base = await v3();
  const maintenance = await getJson(`${base}/maintenance`);
  const all = query.get("all") === "1";
  const runs = all ? maintenance.runs : maintenance.changes;
  const intervals = Object.entries(maintenance.intervals_ms || {}).map(([job, ms]) =>
    [job, `every ${formatCount(ms / 1000)} s`]);
  const toggle = all
    ? h("a", { href: "#/maintenance", id: "runs-toggle" }, "Show only changes and failures")
    : h("a", { href: "#/maintenance?all=1", id: "runs-toggle" }, "Show every run");
  main.replaceChildren(
    h("h1", {}, "Maintenance"),
    h("p", { class: "muted" }, `Node ${maintenance.node_id}: scheduled maintenance is `
      + `${maintenance.enabled ? "on" : "off (LAKELOG_MAINTENANCE)"}. It runs on the partitions `
      + "this node is the preferred leader of."),
    table(["Job", "Interval"], intervals, { id: "intervals" }),
    h("h2", {}, all ? "Recent runs" : "Recent changes and failures",
      ` (the newest ${Math.min(RUNS_SHOWN_MAX, runs.length)} of ${runs.length} kept)`),
    h("p", {}, toggle),
    table(RUN_COLUMNS, runRows(runs), { id: "runs" }),
  );
}
