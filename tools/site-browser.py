#!/usr/bin/env python3
"""site-browser.py BROWSER SITE SHOTS PAGE... -- open pages of the built site
in a headless Chromium and fail when a reader would see something broken.

`make site` (tools/site.R) runs it on the home page, a reference page and the
memory article. The browser itself reports what it rendered, through the
DevTools protocol over a pipe (--remote-debugging-pipe; no port, no network,
python3's standard library only):

  - every <img> decoded: img.decode() resolved and naturalWidth > 0, so a
    PNG with a broken header, or not a PNG, fails, not only a missing file;
    Chromium draws a truncated or damaged PNG in part without an error, so
    each PNG it loaded from the site is also read here: every chunk's CRC,
    the image data inflated to its end, and the closing IEND chunk;
  - every link of the page that points into the site resolves to a file of
    the site, and its #fragment, if any, to an id or name in that file;
  - the page asked for nothing outside the site (no CDN, no web font) and
    every local file it asked for (script, style, font) loaded;
  - no script on the page threw, and where the page has an "On this page"
    list (#toc, filled by pkgdown/assets/site.js), it is not empty.

It saves a screenshot of each page (the whole page, up to MAX_HEIGHT pixels)
into SHOTS for a person to look at. Exit status 1 lists every failure.
"""

import base64
import fcntl
import html.parser
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import urllib.parse
import zlib

WIDTH, HEIGHT, MAX_HEIGHT = 1280, 900, 6000
TIMEOUT_S = 60

# Run in the page once it has loaded; the browser's own verdict on each image.
PAGE_REPORT = """(async () => {
  const images = await Promise.all(Array.from(document.images).map(async (img) => {
    try { await img.decode(); } catch (e) {}
    return {src: img.currentSrc || img.src, width: img.naturalWidth,
            ok: img.complete && img.naturalWidth > 0};
  }));
  const links = Array.from(document.querySelectorAll('a[href]'), (a) => a.href);
  const toc = document.getElementById('toc');
  return {images: images, links: links,
          toc_links: toc ? toc.querySelectorAll('a').length : null,
          height: Math.ceil(document.documentElement.scrollHeight)};
})()"""


class Browser:
    """One headless Chromium, driven over fds 3 (commands) and 4 (replies)."""

    def __init__(self, exe, profile):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Above 10 so that placing them at 3 and 4 in the child cannot
        # overwrite one with the other.
        hi_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
        hi_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)

        def place():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", "--disable-extensions", "--mute-audio",
             "--disable-dev-shm-usage",
             "--remote-debugging-pipe", "--user-data-dir=" + profile,
             "--proxy-server=127.0.0.1:9", "about:blank"],
            pass_fds=(3, 4), preexec_fn=place,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (to_child_r, from_child_w, hi_r, hi_w):
            os.close(fd)
        self._buf = b""
        self._next_id = 0
        self.events = []
        self.seen = []

    def _read_message(self):
        while b"\0" not in self._buf:
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("the browser closed its pipe (exit status %s)"
                                   % self.proc.poll())
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method, params=None, session=None):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError("%s: %s" % (method, reply["error"]))
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method, session):
        """Events already queued first, then new ones, until `method` arrives."""
        while True:
            while self.events:
                ev = self.events.pop(0)
                self.seen.append(ev)
                if ev.get("method") == method and ev.get("sessionId") == session:
                    return ev
            self.events.append(self._read_message())

    def close(self):
        signal.alarm(10)
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        signal.alarm(0)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Anchors(html.parser.HTMLParser):
    """The ids and names a #fragment can point to."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.names.add(value)


def anchors_of(path, cache={}):
    if path not in cache:
        parser = Anchors()
        with open(path, encoding="utf-8", errors="replace") as f:
            parser.feed(f.read())
        cache[path] = parser.names
    return cache[path]


def png_damage(path):
    """None when the PNG file is whole, else what is wrong with it."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return "not a PNG"
    pos, idat = 8, zlib.decompressobj()
    while pos + 12 <= len(data):
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + size]
        crc = data[pos + 8 + size:pos + 12 + size]
        if len(body) < size or len(crc) < 4:
            return "truncated in a %s chunk" % kind.decode("latin-1")
        if struct.unpack(">I", crc)[0] != zlib.crc32(kind + body) & 0xffffffff:
            return "bad CRC in a %s chunk" % kind.decode("latin-1")
        if kind == b"IDAT":
            try:
                idat.decompress(body)
            except zlib.error as e:
                return "image data does not inflate (%s)" % e
        if kind == b"IEND":
            return None if idat.eof else "image data ends early"
        pos += 12 + size
    return "truncated: no IEND chunk"


def check_link(url, site):
    """None when an internal link resolves, else why not; external links pass."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file":
        return None
    path = urllib.parse.unquote(parts.path)
    if not (path + os.sep).startswith(site + os.sep):
        return "points outside the site"
    if os.path.isdir(path):
        path = os.path.join(path, "index.html")
    if not os.path.isfile(path):
        return "no such file"
    frag = urllib.parse.unquote(parts.fragment)
    if frag and path.endswith(".html") and frag not in anchors_of(path):
        return "no #%s in %s" % (frag, os.path.relpath(path, site))
    return None


def check_page(browser, site, page, shot):
    url = "file://" + urllib.parse.quote(os.path.join(site, page))
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget",
                           {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Page", "Runtime", "Network"):
        browser.send(domain + ".enable", session=session)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1,
                  "mobile": False}, session=session)
    browser.seen = []
    browser.send("Page.navigate", {"url": url}, session=session)
    browser.wait_for("Page.loadEventFired", session)
    report = browser.send("Runtime.evaluate",
                          {"expression": PAGE_REPORT, "awaitPromise": True,
                           "returnByValue": True}, session=session)["result"]["value"]
    height = min(max(report["height"], HEIGHT), MAX_HEIGHT)
    png = browser.send("Page.captureScreenshot",
                       {"format": "png", "captureBeyondViewport": True,
                        "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height,
                                 "scale": 1}}, session=session)["data"]
    with open(shot, "wb") as f:
        f.write(base64.b64decode(png))
    browser.events, seen = [], browser.seen + browser.events
    browser.send("Target.closeTarget", {"targetId": target})

    failures = []
    if report["toc_links"] == 0:
        failures.append('the "On this page" list (#toc) is empty')
    for img in report["images"]:
        if not img["ok"]:
            failures.append("image did not load or decode: " + img["src"])
            continue
        parts = urllib.parse.urlsplit(img["src"])
        if parts.scheme == "file" and parts.path.lower().endswith(".png"):
            damage = png_damage(urllib.parse.unquote(parts.path))
            if damage:
                failures.append("image damaged (%s): %s" % (damage, img["src"]))
    for link in sorted(set(report["links"])):
        why = check_link(link, site)
        if why:
            failures.append("broken link %s (%s)" % (link, why))
    requested = {}
    for ev in seen:
        method, params = ev.get("method"), ev.get("params", {})
        if ev.get("sessionId") != session:
            continue
        if method == "Network.requestWillBeSent":
            req_url = params["request"]["url"]
            requested[params["requestId"]] = req_url
            if urllib.parse.urlsplit(req_url).scheme not in ("file", "data", "about", "blob"):
                failures.append("asked the network for " + req_url)
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            req_url = requested.get(params["requestId"], "?")
            if urllib.parse.urlsplit(req_url).scheme == "file":
                failures.append("could not load %s (%s)" % (req_url, params.get("errorText")))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            failures.append("script error: %s" % text.splitlines()[0])
    return report, failures


def too_slow(signum, frame):
    raise RuntimeError("the browser gave no answer within %d s" % TIMEOUT_S)


def main(argv):
    if len(argv) < 5:
        sys.exit(__doc__.splitlines()[0])
    exe, site, shots, pages = argv[1], os.path.realpath(argv[2]), argv[3], argv[4:]
    os.makedirs(shots, exist_ok=True)
    failed = 0
    signal.signal(signal.SIGALRM, too_slow)
    with tempfile.TemporaryDirectory(prefix="site-browser-") as profile:
        browser = Browser(exe, profile)
        try:
            for page in pages:
                shot = os.path.join(shots, page.replace("/", "_").replace(".html", ".png"))
                signal.alarm(TIMEOUT_S)
                try:
                    report, failures = check_page(browser, site, page, shot)
                except RuntimeError as e:
                    print("site-browser: %s: %s" % (page, e))
                    return 1
                signal.alarm(0)
                n_int = sum(urllib.parse.urlsplit(u).scheme == "file" for u in set(report["links"]))
                print("site-browser: %s: %d images decoded of %d, %d internal links, %s" %
                      (page, sum(i["ok"] for i in report["images"]), len(report["images"]),
                       n_int, "ok" if not failures else "%d FAILURES" % len(failures)))
                for why in failures:
                    print("  " + why)
                failed += len(failures)
        finally:
            browser.close()
    print("site-browser: screenshots in %s" % shots)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
