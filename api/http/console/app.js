// The console's shell: hash routes to pages, the sign-in form when the gateway asks for a key,
// and the banner for errors. A page is `async (view, ...routeArgs, query, signal)`: it fills
// `view`, its own element (a page still loading when the user moves on fills a view nobody
// sees), and stops its timers when `signal` aborts.
import { credentials, signIn, signOut } from "./api.js";
import { h } from "./dom.js";
import { groupPage, groupsPage } from "./groups.js";
import { messagesPage } from "./messages.js";
import { clearBanner, rerender, showError, SIGN_IN_EVENT } from "./notice.js";
import { maintenancePage, nodesPage } from "./nodes.js";
import { schemasPage, subjectPage } from "./schemas.js";
import { sharePage, sharesPage } from "./shares.js";
import { topicPage, topicsPage } from "./topics.js";

const ROUTES = [
  [/^#\/topics\/([^/]+)\/messages$/, messagesPage, "topics"],
  [/^#\/topics\/([^/]+)$/, topicPage, "topics"],
  [/^#\/topics$/, topicsPage, "topics"],
  [/^#\/groups\/([^/]+)$/, groupPage, "groups"],
  [/^#\/groups$/, groupsPage, "groups"],
  [/^#\/shares\/([^/]+)$/, sharePage, "shares"],
  [/^#\/shares$/, sharesPage, "shares"],
  [/^#\/schemas\/([^/]+)$/, subjectPage, "schemas"],
  [/^#\/schemas$/, schemasPage, "schemas"],
  [/^#\/nodes$/, nodesPage, "nodes"],
  [/^#\/maintenance$/, maintenancePage, "maintenance"],
];

let shown = null; // the AbortController of the page on screen

function parseHash() {
  const [path, query] = (location.hash || "#/topics").split("?");
  return { path, query: new URLSearchParams(query || "") };
}

function stopShownPage() {
  shown?.abort();
  shown = null;
}

async function render() {
  stopShownPage();
  const controller = new AbortController();
  shown = controller;
  clearBanner();
  const { path, query } = parseHash();
  const route = ROUTES.find(([pattern]) => pattern.test(path));
  if (!route) {
    location.hash = "#/topics";
    return;
  }
  const [pattern, page, section] = route;
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.section === section);
  }
  renderWho();
  const view = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  document.getElementById("main").replaceChildren(view);
  try {
    const args = pattern.exec(path).slice(1).map(decodeURIComponent);
    await page(view, ...args, query, controller.signal);
  } catch (error) {
    if (!controller.signal.aborted) showError(view, error);
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
  stopShownPage(); // no refresh may replace the form while the user types
  document.getElementById("main").replaceChildren(loginForm(event.detail));
});
window.addEventListener("hashchange", render);
window.addEventListener(rerender.EVENT, render);
render();
