"""Headless Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`):
no WebDriver, no driver download, no websocket library. Chromium is Debian's `chromium`
package, installed here when missing (as root, with apt-get) so a fresh machine runs the
console tests too.

The protocol: JSON messages separated by NUL, Chromium reads commands on its fd 3 and writes
answers and events on its fd 4. Pages are attached with `flatten`, so every command to a page
carries its session id.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

CHROMIUM = "chromium"
COMMAND_TIMEOUT_S = 30
FD_FLOOR = 10  # the pipe ends are moved above fds 3 and 4 before the child takes them
VIEWPORT = {"width": 1280, "height": 860}


class BrowserError(AssertionError):
    """A DevTools command failed, or a page never reached what a test waited for."""


def ensure_chromium() -> str:
    """The chromium executable, installed with apt-get if missing (the tests' set-up)."""
    found = shutil.which(CHROMIUM)
    if found:
        return found
    if os.geteuid() != 0:
        raise BrowserError("chromium is missing: apt-get install chromium (Debian's package)")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", CHROMIUM]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True)
        subprocess.run(install, env=env, check=True, capture_output=True)
    found = shutil.which(CHROMIUM)
    if not found:
        raise BrowserError("apt-get installed chromium but it is not on PATH")
    return found


class Browser:
    def __init__(self, profile_dir: Path) -> None:
        executable = ensure_chromium()
        to_child_read, to_child_write = os.pipe()
        from_child_read, from_child_write = os.pipe()
        child_in = fcntl.fcntl(to_child_read, fcntl.F_DUPFD, FD_FLOOR)
        child_out = fcntl.fcntl(from_child_write, fcntl.F_DUPFD, FD_FLOOR)
        os.close(to_child_read)
        os.close(from_child_write)

        def take_pipes() -> None:  # in the child, before exec
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--remote-debugging-pipe",
                "--no-sandbox",  # root in CI
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                f"--user-data-dir={profile_dir}",
                "about:blank",
            ],
            preexec_fn=take_pipes,
            pass_fds=(3, 4, child_in, child_out),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(child_in)
        os.close(child_out)
        self._write_fd = to_child_write
        self._read_fd = from_child_read
        self._next_id = 0
        self._lock = threading.Lock()
        self._answers: dict[int, queue.Queue] = {}
        self.events: list[dict] = []
        threading.Thread(target=self._read_forever, daemon=True).start()

    def _read_forever(self) -> None:
        buffer = b""
        while True:
            chunk = os.read(self._read_fd, 1 << 16)
            if not chunk:  # chromium exited
                os.close(self._read_fd)
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                try:
                    message = json.loads(raw)
                except ValueError:
                    self.events.append({"method": "lakelog.unreadable", "params": {}})
                    continue  # one bad message must not stop every later answer
                self._dispatch(message)

    def _dispatch(self, message: dict) -> None:
        if "id" in message:
            with self._lock:
                waiting = self._answers.pop(message["id"], None)
            if waiting is not None:
                waiting.put(message)
        else:
            self.events.append(message)

    def send(self, method: str, session_id: str | None = None, **params) -> dict:
        with self._lock:
            self._next_id += 1
            command_id = self._next_id
            answer: queue.Queue = queue.Queue()
            self._answers[command_id] = answer
        message = {"id": command_id, "method": method, "params": params}
        if session_id:
            message["sessionId"] = session_id
        os.write(self._write_fd, json.dumps(message).encode() + b"\0")
        try:
            reply = answer.get(timeout=COMMAND_TIMEOUT_S)
        except queue.Empty:
            waited = f"{COMMAND_TIMEOUT_S}s"
            raise BrowserError(f"chromium did not answer {method} in {waited}") from None
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def new_page(self) -> Page:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        return Page(self, session, target)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._write_fd)


class Page:
    def __init__(self, browser: Browser, session_id: str, target_id: str) -> None:
        self.browser = browser
        self.session_id = session_id
        self.target_id = target_id
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self._viewport(VIEWPORT["height"])

    def send(self, method: str, **params) -> dict:
        return self.browser.send(method, self.session_id, **params)

    def _viewport(self, height: int) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=VIEWPORT["width"],
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str):
        """The value of a JavaScript expression (promises awaited)."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 20, what: str | None = None):
        """Poll until the expression is truthy; returns its value (True for an element)."""
        deadline = time.monotonic() + timeout_s
        value = None
        # An element would come back as {} (falsy here): found is what matters.
        probe = f"(() => {{ const v = ({expression}); return v instanceof Node ? true : v; }})()"
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(probe)
            except BrowserError:
                value = None  # the page is between documents
            if value:
                return value
            time.sleep(0.1)
        body = self.evaluate("document.body ? document.body.innerText : ''")
        raise BrowserError(f"timed out waiting for {what or expression}; the page shows:\n{body}")

    def text(self, selector: str) -> str:
        return self.evaluate(f"document.querySelector({json.dumps(selector)})?.innerText ?? ''")

    def rows(self, table_selector: str) -> list[list[str]]:
        """The cell texts of a table's body rows."""
        return self.evaluate(
            f"Array.from(document.querySelectorAll({json.dumps(table_selector + ' tbody tr')}))"
            ".map(tr => Array.from(tr.cells).map(td => td.innerText))"
        )

    def fill(self, selector: str, value: str) -> None:
        self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            f" e.value = {json.dumps(value)}; e.dispatchEvent(new Event('input')); }})()"
        )

    def click(self, selector: str) -> None:
        self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    def screenshot(self, path: Path) -> None:
        """The page's content (below the fold too, no empty space under it) as a PNG."""
        height = self.evaluate("Math.ceil(document.body.getBoundingClientRect().height) + 24")
        self._viewport(max(int(height), 200))
        data = self.send("Page.captureScreenshot", format="png")["data"]
        self._viewport(VIEWPORT["height"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        """Close the tab (its timers stop with it)."""
        self.browser.send("Target.closeTarget", targetId=self.target_id)

    def problems(self) -> list[str]:
        """Uncaught exceptions, console errors and browser log errors (CSP refusals, console
        files not found) of this page so far."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session_id:
                continue
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(str(params["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(str(params.get("args")))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                if entry.get("source") == "network" and "/ui/" not in entry.get("url", ""):
                    continue  # an API error answer: the page shows it (tests check that)
                found.append(entry.get("text", ""))
        return found
