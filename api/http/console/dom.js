// h(tag, attributes, ...children): the console builds every element with it. Text goes in as
// text nodes, never as HTML, so keys, values and names from the log cannot inject markup.
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// A table from column headers and rows of cells; a header ending in "#" is numeric.
export function table(headers, rows, attributes = {}) {
  const numeric = headers.map((title) => title.endsWith(" #"));
  const head = headers.map((title, i) =>
    h("th", { class: numeric[i] ? "num" : null }, title.replace(/ #$/, "")));
  const body = rows.map((cells) =>
    h("tr", {}, cells.map((cell, i) => h("td", { class: numeric[i] ? "num" : null }, cell))));
  if (!rows.length) {
    body.push(h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "None.")));
  }
  return h("table", attributes, h("thead", {}, h("tr", {}, head)), h("tbody", {}, body));
}

export function link(href, text) {
  return h("a", { href }, text);
}

// Small labels (partitions, headers), separated by spaces so that they read (and copy) apart.
export function tags(items) {
  return items.flatMap((item, i) => [i ? " " : null, h("span", { class: "tag" }, item)]);
}

export function card(label, value) {
  return h("div", { class: "card" }, h("b", {}, value), label);
}

export function formatBytes(bytes) {
  if (bytes === null || bytes === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

export function formatCount(count) {
  return count === null || count === undefined ? "–" : count.toLocaleString("en-US");
}

export function formatTime(ms) {
  return ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC") : "–";
}
