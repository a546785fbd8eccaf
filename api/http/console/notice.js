// The banner over every page, and errors: a 401 asks the shell for the sign-in form.
import { ApiError } from "./api.js";

export const SIGN_IN_EVENT = "lakelog:sign-in";

export function showBanner(text, ok = false) {
  const banner = document.getElementById("banner");
  banner.textContent = text;
  banner.className = ok ? "ok" : "";
  banner.hidden = !text;
}

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
