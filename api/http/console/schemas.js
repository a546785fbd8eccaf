// The schema registry: its subjects (latest version, id, type, compatibility level), and a
// subject's versions with each one's schema.
import { getJson } from "./api.js";
import { h, link, table } from "./dom.js";

function subjectPath(subject) {
  return `/subjects/${encodeURIComponent(subject)}`;
}

function pretty(schema, type) {
  if (type === "PROTOBUF") return schema;
  try {
    return JSON.stringify(JSON.parse(schema), null, 2);
  } catch {
    return schema;
  }
}

export async function schemasPage(main) {
  const [subjects, global] = await Promise.all([getJson("/subjects"), getJson("/config")]);
  const latest = await Promise.all(subjects.map((s) => getJson(`${subjectPath(s)}/versions/latest`)));
  const rows = latest.map((v) => [
    link(`#/schemas/${encodeURIComponent(v.subject)}`, v.subject),
    String(v.version),
    String(v.id),
    v.schemaType || "AVRO",
  ]);
  main.replaceChildren(
    h("h1", {}, "Schemas"),
    h("p", { class: "muted" },
      `Compatibility level: ${global.compatibilityLevel} (unless a subject sets its own). `
      + "Clients register and read schemas at this gateway's address (schema.registry.url)."),
    table(["Subject", "Latest version #", "Id #", "Type"], rows, { id: "subjects" }),
  );
}

export async function subjectPage(main, subject, query) {
  const versions = await getJson(`${subjectPath(subject)}/versions`);
  const chosen = query.get("version") || "latest";
  const [shown, level] = await Promise.all([
    getJson(`${subjectPath(subject)}/versions/${chosen}`),
    getJson(`/config/${encodeURIComponent(subject)}`, { params: { defaultToGlobal: true } }),
  ]);
  const type = shown.schemaType || "AVRO";
  const choices = versions.map((v) => link(
    `#/schemas/${encodeURIComponent(subject)}?version=${v}`,
    v === shown.version ? `[${v}]` : String(v)));
  main.replaceChildren(
    h("h1", {}, "Subject ", subject),
    h("p", {}, `Versions: `, ...choices.flatMap((c) => [c, " "])),
    h("p", { class: "muted", id: "shown" },
      `Version ${shown.version}: id ${shown.id}, ${type}; compatibility ${level.compatibilityLevel}.`),
    ...(shown.references || []).map((r) => h("div", { class: "tag" },
      `references ${r.name} = ${r.subject} version ${r.version}`)),
    h("pre", { id: "schema" }, pretty(shown.schema, type)),
  );
}
