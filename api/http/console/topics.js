// Topics: the list with sizes, a topic's partitions (leader, log start, high watermark, size)
// and configs, creating a topic and changing its configs.
import { getJson, mapLimited, sendJson, v3 } from "./api.js";
import { flash, rerender, showBanner, showError } from "./notice.js";
import { card, formatBytes, formatCount, h, link, table } from "./dom.js";

const PARTITION_REQUESTS_MAX = 8; // partitions looked up at once

function topicPath(topic) {
  return `/topics/${encodeURIComponent(topic)}`;
}

// Each partition's leader, bounds and size (v2 /partitions and /offsets).
export async function partitionsOf(topic) {
  const partitions = await getJson(`${topicPath(topic)}/partitions`);
  return mapLimited(partitions, PARTITION_REQUESTS_MAX, async (p) => {
    const offsets = await getJson(`${topicPath(topic)}/partitions/${p.partition}/offsets`);
    return {
      partition: p.partition,
      leader: p.leader,
      logStart: offsets.beginning_offset,
      highWatermark: offsets.end_offset,
      lastStable: offsets.last_stable_offset,
      sizeBytes: offsets.size_bytes,
    };
  });
}

function sum(items, field) {
  return items.reduce((total, item) => total + (item[field] || 0), 0);
}

function recordsIn(partitions) {
  return partitions.reduce((total, p) => total + (p.highWatermark - p.logStart), 0);
}

export async function topicsPage(main) {
  const base = await v3();
  const topics = (await getJson(`${base}/topics`)).data;
  // A topic deleted meanwhile (or whose leader is moving) shows "–", not a failed page.
  const details = await mapLimited(topics, 4, (t) => partitionsOf(t.topic_name).catch(() => null));
  const rows = topics.map((t, i) => [
    link(`#/topics/${encodeURIComponent(t.topic_name)}`, t.topic_name),
    formatCount(t.partitions_count),
    formatCount(details[i] && recordsIn(details[i])),
    formatCount(details[i] && sum(details[i], "highWatermark")),
    formatBytes(details[i] && sum(details[i], "sizeBytes")),
    link(`#/topics/${encodeURIComponent(t.topic_name)}/messages`, "messages"),
  ]);
  main.replaceChildren(
    h("h1", {}, "Topics"),
    table(["Topic", "Partitions #", "Records #", "Offsets written #", "Size #", ""], rows,
      { id: "topics" }),
    createTopicForm(base),
  );
}

function createTopicForm(base) {
  const name = h("input", { name: "topic_name", required: true, pattern: "[A-Za-z0-9._\\-]+" });
  const partitions = h("input", { name: "partitions_count", type: "number", min: 1, value: 1 });
  const configs = h("input", {
    name: "configs", size: 40, placeholder: "cleanup.policy=compact, retention.ms=86400000",
  });
  const submit = async (event) => {
    event.preventDefault();
    try {
      await sendJson("POST", `${base}/topics`, {
        topic_name: name.value.trim(),
        partitions_count: Number(partitions.value),
        configs: parseConfigs(configs.value),
      });
      flash(`Created topic ${name.value.trim()}.`);
      location.hash = `#/topics/${encodeURIComponent(name.value.trim())}`;
    } catch (error) {
      showError(null, error);
    }
  };
  return h("div", {},
    h("h2", {}, "Create a topic"),
    h("form", { class: "inline", id: "create-topic", onsubmit: submit },
      h("label", {}, "Name", name),
      h("label", {}, "Partitions", partitions),
      h("label", {}, "Configs (name=value, comma-separated)", configs),
      h("button", { type: "submit" }, "Create")));
}

function parseConfigs(text) {
  return text.split(",").map((item) => item.trim()).filter(Boolean).map((item) => {
    const [name, ...rest] = item.split("=");
    return { name: name.trim(), value: rest.join("=").trim() };
  });
}

export async function topicPage(main, topic) {
  const base = await v3();
  const [partitions, configs] = await Promise.all([
    partitionsOf(topic),
    getJson(`${base}/topics/${encodeURIComponent(topic)}/configs`).then((c) => c.data),
  ]);
  const rows = partitions.map((p) => [
    String(p.partition),
    link("#/nodes", `node ${p.leader}`),
    formatCount(p.logStart),
    formatCount(p.highWatermark),
    formatCount(p.lastStable),
    formatCount(p.highWatermark - p.logStart),
    formatBytes(p.sizeBytes),
    link(`#/topics/${encodeURIComponent(topic)}/messages?partition=${p.partition}`, "browse"),
  ]);
  main.replaceChildren(
    h("h1", {}, "Topic ", h("span", { id: "topic-name" }, topic)),
    h("div", { class: "cards" },
      card("partitions", formatCount(partitions.length)),
      card("records", formatCount(recordsIn(partitions))),
      card("size", formatBytes(sum(partitions, "sizeBytes")))),
    h("p", {}, link(`#/topics/${encodeURIComponent(topic)}/messages`, "Browse messages →")),
    h("h2", {}, "Partitions"),
    table(["Partition #", "Leader", "Log start #", "High watermark #", "Last stable #",
      "Records #", "Size #", ""], rows, { id: "partitions" }),
    h("h2", {}, "Configs"),
    configTable(base, topic, configs),
  );
}

function configTable(base, topic, configs) {
  const rows = configs.map((c) => {
    const input = h("input", { value: c.value ?? "", name: c.name, size: 24,
      disabled: c.is_read_only });
    const path = `${base}/topics/${encodeURIComponent(topic)}/configs/${encodeURIComponent(c.name)}`;
    const save = async () => {
      try {
        await sendJson("PUT", path, { value: input.value });
        showBanner(`${c.name} set to ${input.value}.`, true);
      } catch (error) {
        showError(null, error);
      }
    };
    const reset = async () => {
      try {
        await sendJson("DELETE", path);
        flash(`${c.name} reset to its default.`);
        rerender();
      } catch (error) {
        showError(null, error);
      }
    };
    return [
      c.name,
      input,
      c.source,
      c.is_read_only ? "" : h("span", {},
        h("button", { class: "plain", onclick: save, "data-config": c.name }, "Save"), " ",
        c.is_default ? "" : h("button", { class: "plain", onclick: reset }, "Reset")),
    ];
  });
  return table(["Name", "Value", "Source", ""], rows, { id: "configs" });
}
