// A line chart of lag over time in plain SVG (no chart library to ship or build).
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#1f6feb", "#d92d20", "#079455", "#dc6803", "#7a5af8", "#0e9384", "#c11574", "#475467"];
const WIDTH = 900;
const HEIGHT = 240;
const PAD = { left: 56, right: 12, top: 12, bottom: 28 };

function svg(tag, attributes) {
  const element = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
  return element;
}

// series: [{name, points: [[time_ms, value], ...]}]
export function lineChart(series) {
  const root = svg("svg", {
    class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, width: "100%", role: "img",
    "aria-label": "lag over time",
  });
  let [t0, t1, vMax] = [Infinity, -Infinity, 1];
  for (const s of series) {
    for (const [t, v] of s.points) { // a loop: spreading many points overflows the stack
      t0 = Math.min(t0, t);
      t1 = Math.max(t1, t);
      vMax = Math.max(vMax, v);
    }
  }
  if (t0 === Infinity) return root;
  const x = (t) => PAD.left + ((t - t0) / Math.max(1, t1 - t0)) * (WIDTH - PAD.left - PAD.right);
  const y = (v) => HEIGHT - PAD.bottom - (v / vMax) * (HEIGHT - PAD.top - PAD.bottom);
  for (const fraction of [0, 0.5, 1]) {
    const value = Math.round(vMax * fraction);
    root.append(svg("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(value), y2: y(value),
      stroke: "#eaecf0" }));
    const label = svg("text", { x: PAD.left - 6, y: y(value) + 4, "text-anchor": "end" });
    label.textContent = value.toLocaleString("en-US");
    root.append(label);
  }
  for (const [t, anchor] of [[t0, "start"], [t1, "end"]]) {
    const label = svg("text", { x: x(t), y: HEIGHT - 8, "text-anchor": anchor });
    label.textContent = new Date(t).toISOString().slice(11, 19);
    root.append(label);
  }
  series.forEach((s, i) => {
    const path = s.points.map(([t, v], j) => `${j ? "L" : "M"}${x(t).toFixed(1)},${y(v).toFixed(1)}`);
    root.append(svg("path", { d: path.join(" "), fill: "none", stroke: COLORS[i % COLORS.length],
      "stroke-width": i === 0 ? 2.5 : 1.5, "data-series": s.name }));
  });
  return root;
}

export function legend(series) {
  const element = document.createElement("div");
  element.className = "legend";
  series.forEach((s, i) => {
    const item = document.createElement("span");
    item.style.setProperty("--swatch", COLORS[i % COLORS.length]);
    item.textContent = s.name;
    element.append(item);
  });
  return element;
}
