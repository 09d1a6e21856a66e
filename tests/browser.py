"""A real headless browser for tests: Debian's chromium dumps a page's DOM after its scripts ran (`dump_dom`), or
is driven over the DevTools protocol (`Chromium`, `Page`: type into a form, click, wait, read DOM and cookies)."""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def chromium() -> str:
    """Path of chromium (apt-get install chromium), else RuntimeError."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("chromium is not installed (apt-get install chromium)")


def dump_dom(url: str, budget_ms: int = 4000, timeout: float = 90.0) -> str:
    """The DOM of `url` after `budget_ms` of (virtual) time, from a fresh profile."""
    with tempfile.TemporaryDirectory(prefix="cnnvideo-chromium-") as profile:
        argv = [chromium()] + FLAGS + ["--user-data-dir=%s" % profile, "--virtual-time-budget=%d" % budget_ms,
                                       "--dump-dom", url]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or "<html" not in proc.stdout:
        raise RuntimeError("chromium failed (%d): %s" % (proc.returncode, proc.stderr[-2000:]))
    return proc.stdout


class CdpError(RuntimeError):
    pass


class Chromium:
    """Headless chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON commands
    on its fd 3, replies and events on its fd 4, each message ended by a NUL byte; no websocket needed), so a
    test can type into a page and submit its form as a user would. Use as a context manager."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self.profile = tempfile.TemporaryDirectory(prefix="cnnvideo-chromium-")
        # our ends stay in this process; theirs become chromium's fds 3 and 4 (numbered >= 10 first, so bash's
        # redirections cannot overwrite one another)
        cmd_r, self.cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        theirs = [fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD_CLOEXEC, 10)]
        for fd in (cmd_r, out_w):
            os.close(fd)
        self.out = os.fdopen(out_r, "rb", buffering=0)
        argv = [chromium()] + FLAGS + ["--user-data-dir=%s" % self.profile.name, "--remote-debugging-pipe",
                                       "about:blank"]
        shell = 'exec "$0" "$@" 3<&%d 4>&%d %d<&- %d>&-' % (theirs[0], theirs[1], theirs[0], theirs[1])
        self.proc = subprocess.Popen([shutil.which("bash") or "/bin/bash", "-c", shell] + argv, pass_fds=theirs,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for fd in theirs:
            os.close(fd)
        self.next_id = 0
        self.replies = {}
        self.events = []
        self.cond = threading.Condition()
        self.stderr = b""
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = self.out.read(65536)
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                with self.cond:
                    if "id" in msg:
                        self.replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                    self.cond.notify_all()
        with self.cond:
            self.replies[None] = {"error": {"message": "chromium closed the pipe"}}
            self.cond.notify_all()

    def _drain_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr = (self.stderr + line)[-4000:]

    def send(self, method: str, params=None, session=None, timeout=None):
        """The result of one DevTools command (CdpError on an error reply or no reply within the timeout)."""
        with self.cond:
            self.next_id += 1
            mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session is not None:
            msg["sessionId"] = session
        os.write(self.cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        with self.cond:
            while mid not in self.replies and None not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CdpError("no reply to %s within %.0f s" % (method, timeout or self.timeout))
                self.cond.wait(left)
            reply = self.replies.pop(mid, None) or self.replies[None]
        if "error" in reply:
            raise CdpError("%s: %s (chromium: %s)" % (method, reply["error"].get("message"),
                                                      self.stderr.decode("utf-8", "replace")[-500:]))
        return reply.get("result", {})

    def page(self) -> "Page":
        """A new tab, attached."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except CdpError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        os.close(self.cmd_w)
        self.out.close()
        self.profile.cleanup()

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Page:
    """One tab of a Chromium: navigate, evaluate JavaScript, type, wait for a condition, read the DOM."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser = browser
        self.session = session
        for domain in ("Page", "Runtime", "Network"):
            self.send(domain + ".enable")

    def send(self, method: str, params=None, timeout=None):
        return self.browser.send(method, params, self.session, timeout)

    def evaluate(self, expression: str, await_promise: bool = False):
        """The value of a JavaScript expression in the page (CdpError when it throws)."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": await_promise})
        if "exceptionDetails" in res:
            raise CdpError("%s threw: %s" % (expression, res["exceptionDetails"]))
        return res["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0):
        """Poll a JavaScript expression every 100 ms until truthy (errors while a page loads are retried);
        its value, else CdpError with the page's URL and the end of its DOM."""

        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
                if value:
                    return value
            except CdpError as e:
                last = e
            time.sleep(0.1)
        try:
            where = "%s: %s" % (self.evaluate("location.href"), self.dom()[-1500:])
        except CdpError:
            where = "?"
        raise CdpError("timed out after %.0f s waiting for %s (%s) at %s" % (timeout, expression, last, where))

    def navigate(self, url: str, timeout: float = 20.0) -> str:
        """Open `url` and wait until its document (maybe after redirects) has loaded; its final URL."""
        self.evaluate("window.__cnnvideo_old = true")
        self.send("Page.navigate", {"url": url})
        self.wait_for("!window.__cnnvideo_old && document.readyState === 'complete'", timeout)
        return self.evaluate("location.href")

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element and type `text` into it (as keyboard input, not by setting its value)."""
        if not self.evaluate("(e => { if (!e) return false; e.focus(); return document.activeElement === e; })"
                             "(document.querySelector(%s))" % _js(selector)):
            raise CdpError("no element %s to type into" % selector)
        self.send("Input.insertText", {"text": text})

    def click(self, selector: str, timeout: float = 20.0) -> str:
        """Click the element (a submit button: the form is posted) and wait for the next document; its URL."""
        self.evaluate("window.__cnnvideo_old = true")
        if not self.evaluate("(e => { if (!e) return false; e.click(); return true; })(document.querySelector(%s))"
                             % _js(selector)):
            raise CdpError("no element %s to click" % selector)
        self.wait_for("!window.__cnnvideo_old && document.readyState === 'complete'", timeout)
        return self.evaluate("location.href")

    def log_in(self, token: str, timeout: float = 20.0) -> str:
        """On the live view's login page: type `token` into its form and submit it; the URL the page goes to."""
        self.type_into("#token", token)
        return self.click("#login button[type=submit]", timeout)

    def dom(self) -> str:
        return self.evaluate("document.documentElement.outerHTML")

    def cookies(self, url: str):
        """The browser's cookies for `url` (DevTools Cookie objects: name, value, httpOnly, sameSite, expires...)."""
        return self.send("Network.getCookies", {"urls": [url]})["cookies"]


def _js(value: str) -> str:
    return json.dumps(value)
