// Share groups (queues): the list, and a group's members and share partitions with their start
// offsets, lag and in-flight records by state, refreshed while the page is open.
import { getJson, v3 } from "./api.js";
import { card, formatCount, h, link, table } from "./dom.js";
import { showError } from "./notice.js";

const REFRESH_MS = 5000;
const STATES = ["available", "acquired", "acknowledged", "archived"];

export async function sharesPage(main) {
  const base = await v3();
  const groups = (await getJson(`${base}/share-groups`)).data;
  const rows = groups.map((g) => [link(`#/shares/${encodeURIComponent(g.group_id)}`, g.group_id)]);
  main.replaceChildren(
    h("h1", {}, "Share groups"),
    h("p", { class: "muted" }, "Queues: each record is acquired by one member and acknowledged on its own."),
    table(["Group"], rows, { id: "share-groups" }),
  );
}

function renderShare(main, group, data) {
  const partitionRows = data.partitions.map((p) => [
    link(`#/topics/${encodeURIComponent(p.topic_name)}`, p.topic_name),
    String(p.partition_id),
    formatCount(p.start_offset),
    formatCount(p.lag),
    ...STATES.map((s) => formatCount(p.records[s])),
  ]);
  const memberRows = data.members.map((m) => [
    m.member_id, m.client_id || "–", m.client_host || "–", String(m.member_epoch), m.topics.join(", "),
  ]);
  const inFlight = (state) => data.partitions.reduce((total, p) => total + p.records[state], 0);
  main.replaceChildren(
    h("h1", {}, "Share group ", h("span", { id: "share-name" }, group)),
    h("div", { class: "cards" },
      card("state", h("span", { class: `state-${data.state}`, id: "share-state" }, data.state)),
      card("members", formatCount(data.members.length)),
      card("acquired", h("span", { id: "share-acquired" }, formatCount(inFlight("acquired")))),
      card("archived", h("span", { id: "share-archived" }, formatCount(inFlight("archived")))),
      card("coordinator", `node ${data.coordinator}`)),
    h("h2", {}, "Share partitions"),
    table(["Topic", "Partition #", "Start offset #", "Lag #", "Available #", "Acquired #",
      "Acknowledged #", "Archived #"], partitionRows, { id: "share-partitions" }),
    h("h2", {}, "Members"),
    table(["Member id", "Client id", "Host", "Epoch #", "Topics"], memberRows,
      { id: "share-members" }),
  );
}

export async function sharePage(main, group, query, signal) {
  const base = await v3();
  const path = `${base}/share-groups/${encodeURIComponent(group)}`;
  let timer = null;
  const refresh = async () => {
    try {
      const data = await getJson(path);
      if (!signal.aborted) renderShare(main, group, data);
    } catch (error) {
      if (!signal.aborted) showError(null, error);
    }
    if (!signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  };
  signal.addEventListener("abort", () => clearTimeout(timer));
  const data = await getJson(path);
  if (signal.aborted) return;
  renderShare(main, group, data);
  timer = setTimeout(refresh, REFRESH_MS);
}
