// Consumer groups: the list with total lag, and a group's state, members, assignments, lag per
// partition and lag over time (the coordinator's samples), refreshed while the page is open.
import { ApiError, getJson, mapLimited, v3 } from "./api.js";
import { legend, lineChart } from "./chart.js";
import { card, formatCount, formatTime, h, link, table, tags } from "./dom.js";
import { showError } from "./notice.js";

const REFRESH_MS = 5000;
const CHART_PARTITIONS_MAX = 7; // more lines than this are noise: the total only

async function lagSummary(groupPath) {
  try {
    return await getJson(`${groupPath}/lag-summary`);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null; // no committed offsets
    throw error;
  }
}

// Kafka's group protocols: "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848).
function groupType(group) {
  return (group.type || "CLASSIC").toLowerCase();
}

export async function groupsPage(main) {
  const base = await v3();
  const groups = (await getJson(`${base}/consumer-groups`)).data;
  const summaries = await mapLimited(groups, 4, (g) =>
    lagSummary(`${base}/consumer-groups/${encodeURIComponent(g.consumer_group_id)}`));
  const rows = groups.map((g, i) => [
    link(`#/groups/${encodeURIComponent(g.consumer_group_id)}`, g.consumer_group_id),
    h("span", { class: `state-${g.state}` }, g.state),
    groupType(g),
    g.partition_assignor || "–",
    `node ${g.coordinator.related.split("/").pop()}`,
    formatCount(summaries[i]?.total_lag ?? null),
    formatCount(summaries[i]?.max_lag ?? null),
  ]);
  main.replaceChildren(
    h("h1", {}, "Consumer groups"),
    table(["Group", "State", "Protocol", "Assignor", "Coordinator", "Total lag #", "Max lag #"], rows,
      { id: "groups" }),
  );
}

async function loadGroup(base, group) {
  const path = `${base}/consumer-groups/${encodeURIComponent(group)}`;
  const [summary, consumers, lags] = await Promise.all([
    getJson(path),
    getJson(`${path}/consumers`).then((c) => c.data),
    getJson(`${path}/lags`).then((l) => l.data),
  ]);
  // Lines per partition only for a few partitions: else the totals, a much smaller answer.
  const perPartition = lags.length <= CHART_PARTITIONS_MAX;
  const history = await getJson(`${path}/lag-history`, { params: { partitions: perPartition } });
  const assignments = await mapLimited(consumers, 4, (c) =>
    getJson(`${path}/consumers/${encodeURIComponent(c.consumer_id)}/assignments`)
      .then((a) => a.data));
  return { summary, consumers, lags, history, assignments };
}

function chartSeries(history) {
  const samples = history.samples;
  const series = [{ name: "total lag", points: samples.map((s) => [s.time_ms, s.total_lag]) }];
  const keys = new Set(samples.flatMap((s) =>
    (s.partitions || []).map((p) => `${p.topic_name}-${p.partition_id}`)));
  if (keys.size > 1 && keys.size <= CHART_PARTITIONS_MAX) {
    for (const key of [...keys].sort()) {
      const points = samples.flatMap((s) => s.partitions
        .filter((p) => `${p.topic_name}-${p.partition_id}` === key)
        .map((p) => [s.time_ms, p.lag]));
      series.push({ name: key, points });
    }
  }
  return series;
}

function renderGroup(main, group, data) {
  const { summary, consumers, lags, history, assignments } = data;
  const totalLag = lags.reduce((total, lag) => total + lag.lag, 0);
  const memberRows = consumers.map((c, i) => [
    c.consumer_id,
    c.client_id || "–",
    c.instance_id || "–",
    tags(assignments[i].map((a) => `${a.topic_name}-${a.partition_id}`)),
  ]);
  const lagRows = lags.map((lag) => [
    link(`#/topics/${encodeURIComponent(lag.topic_name)}`, lag.topic_name),
    String(lag.partition_id),
    formatCount(lag.current_offset),
    formatCount(lag.log_end_offset),
    formatCount(lag.lag),
    lag.consumer_id || "–",
  ]);
  const series = chartSeries(history);
  const samples = history.samples;
  main.replaceChildren(
    h("h1", {}, "Consumer group ", h("span", { id: "group-name" }, group)),
    h("div", { class: "cards" },
      card("state", h("span", { class: `state-${summary.state}`, id: "group-state" }, summary.state)),
      card("protocol", h("span", { id: "group-type" }, groupType(summary))),
      card("members", formatCount(consumers.length)),
      card("total lag", h("span", { id: "total-lag" }, formatCount(totalLag))),
      card("coordinator", `node ${summary.coordinator.related.split("/").pop()}`),
      card("assignor", summary.partition_assignor || "–")),
    h("h2", {}, "Lag over time"),
    h("p", { class: "muted" }, samples.length
      ? `${samples.length} samples every ${history.interval_ms / 1000} s, last at `
        + `${formatTime(samples[samples.length - 1].time_ms)}.`
      : "No samples yet: the coordinator samples lag once the group has committed offsets."),
    h("div", { id: "lag-chart" }, lineChart(series), legend(series)),
    h("h2", {}, "Lag per partition"),
    table(["Topic", "Partition #", "Committed #", "Log end #", "Lag #", "Owner"], lagRows,
      { id: "lags" }),
    h("h2", {}, "Members and assignments"),
    table(["Consumer id", "Client id", "Instance id", "Assigned partitions"], memberRows,
      { id: "members" }),
  );
}

export async function groupPage(main, group, query, signal) {
  const base = await v3();
  let timer = null;
  // The next refresh is scheduled once this one has finished: slow answers never overlap.
  const refresh = async () => {
    try {
      const data = await loadGroup(base, group);
      if (!signal.aborted) renderGroup(main, group, data);
    } catch (error) {
      if (!signal.aborted) showError(null, error);
    }
    if (!signal.aborted) timer = setTimeout(refresh, REFRESH_MS);
  };
  signal.addEventListener("abort", () => clearTimeout(timer));
  const data = await loadGroup(base, group);
  if (signal.aborted) return;
  renderGroup(main, group, data);
  timer = setTimeout(refresh, REFRESH_MS);
}
