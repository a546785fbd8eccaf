// The banner over every page, and errors: a 401 asks the shell for the sign-in form.
import { ApiError } from "./api.js";

export const SIGN_IN_EVENT = "lakelog:sign-in";

let flashed = null; // a confirmation for the page about to be shown

export function showBanner(text, ok = false) {
  const banner = document.getElementById("banner");
  banner.textContent = text;
  banner.className = ok ? "ok" : "";
  banner.hidden = !text;
}

// A confirmation that outlives the navigation that follows it (shown by the next page).
export function flash(text) {
  flashed = text;
}

// Every page starts with an empty banner, or with the confirmation flashed just before it.
export function clearBanner() {
  showBanner(flashed ?? "", flashed !== null);
  flashed = null;
}

// Show the current page again (after a change it displays).
export function rerender() {
  window.dispatchEvent(new Event(rerender.EVENT));
}
rerender.EVENT = "lakelog:rerender";

// `main`: the page, cleared if it shows nothing but "Loading…" (null: leave the page as is).
export function showError(main, error) {
  if (error instanceof ApiError && error.status === 401) {
    window.dispatchEvent(new CustomEvent(SIGN_IN_EVENT, { detail: error.message }));
    return;
  }
  const code = error instanceof ApiError ? ` (error_code ${error.errorCode})` : "";
  showBanner(`${error.message}${code}`);
  if (main && main.textContent === "Loading…") main.replaceChildren();
}
