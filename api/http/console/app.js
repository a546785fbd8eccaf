// The console's shell: hash routes to pages, the sign-in form when the gateway asks for a key,
// and the banner for errors. Each page is `async (main, params) => stop?`.
import { credentials, signIn, signOut } from "./api.js";
import { h } from "./dom.js";
import { groupPage, groupsPage } from "./groups.js";
import { messagesPage } from "./messages.js";
import { showBanner, showError, SIGN_IN_EVENT } from "./notice.js";
import { maintenancePage, nodesPage } from "./nodes.js";
import { topicPage, topicsPage } from "./topics.js";

const ROUTES = [
  [/^#\/topics\/([^/]+)\/messages$/, messagesPage, "topics"],
  [/^#\/topics\/([^/]+)$/, topicPage, "topics"],
  [/^#\/topics$/, topicsPage, "topics"],
  [/^#\/groups\/([^/]+)$/, groupPage, "groups"],
  [/^#\/groups$/, groupsPage, "groups"],
  [/^#\/nodes$/, nodesPage, "nodes"],
  [/^#\/maintenance$/, maintenancePage, "maintenance"],
];

let stopPage = null;

function parseHash() {
  const [path, query] = (location.hash || "#/topics").split("?");
  return { path, query: new URLSearchParams(query || "") };
}

async function render() {
  if (stopPage) stopPage();
  stopPage = null;
  showBanner("");
  const { path, query } = parseHash();
  const route = ROUTES.find(([pattern]) => pattern.test(path));
  if (!route) {
    location.hash = "#/topics";
    return;
  }
  const [pattern, page, section] = route;
  const args = pattern.exec(path).slice(1).map(decodeURIComponent);
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.section === section);
  }
  renderWho();
  const main = document.getElementById("main");
  main.replaceChildren(h("p", { class: "muted" }, "Loading…"));
  try {
    stopPage = (await page(main, ...args, query)) || null;
  } catch (error) {
    showError(main, error);
  }
}

function loginForm(reason) {
  const key = h("input", {
    name: "api_key", type: "password", required: true, autocomplete: "current-password",
    placeholder: "<key_id>.<secret>", size: 48,
  });
  const submit = (event) => {
    event.preventDefault();
    signIn(key.value.trim());
    render();
  };
  return h("form", { class: "login", id: "login", onsubmit: submit },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, reason,
      " Paste an API key, as `lakelog api-keys create` printed it."),
    h("label", {}, "API key", key),
    h("p", {}, h("button", { type: "submit" }, "Sign in")));
}

function renderWho() {
  const who = document.getElementById("who");
  const current = credentials();
  if (!current) {
    who.replaceChildren();
    return;
  }
  const keyId = current.replace(/^Bearer /, "").split(".")[0];
  const out = () => {
    signOut();
    render();
  };
  who.replaceChildren(`key ${keyId}`, h("button", { class: "plain", onclick: out }, "Sign out"));
}

window.addEventListener(SIGN_IN_EVENT, (event) => {
  document.getElementById("main").replaceChildren(loginForm(event.detail));
});
window.addEventListener("hashchange", render);
render();
