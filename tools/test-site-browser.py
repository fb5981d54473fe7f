#!/usr/bin/env python3
"""test-site-browser.py BROWSER -- show that tools/site-browser.py fails for
the reasons it names: a two-page site in a temporary folder is checked once
whole (must pass) and then with one fault at a time (each must fail, naming
the fault). `make site` runs it before the real check."""

import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def png(width, height):
    """A valid grey PNG, made here so that the test needs no image file."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))
    rows = b"".join(b"\0" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PAGE = """<!DOCTYPE html><html><head><title>t</title>%s</head><body>
<h2 id="top">Top</h2><img src="plot.png" alt="plot">
<a href="other.html">other</a> <a href="other.html#part">part</a>
<a href="https://example.org/">outside links are not followed</a>
</body></html>"""

FAULTS = {
    # name: (what to change, text the failure must contain)
    "not a PNG": ("plot.png", b"<html>an error page saved as plot.png</html>",
                  "image did not load or decode"),
    "broken PNG header": ("plot.png", png(40, 30)[:17] + b"\x7f" + png(40, 30)[18:],
                          "image did not load or decode"),
    "truncated PNG": ("plot.png", png(40, 30)[:60], "image damaged"),
    "damaged PNG data": ("plot.png", png(40, 30)[:45] + b"\xff" + png(40, 30)[46:],
                         "image damaged"),
    "broken link": ("index.html", PAGE.replace("other.html\"", "gone.html\"") % "",
                    "broken link"),
    "broken #fragment": ("other.html", '<html><body><p id="elsewhere">x</p></body></html>',
                         "no #part"),
    "network request": ("index.html", PAGE % '<link rel="stylesheet" href="https://cdn.invalid/x.css">',
                        "asked the network"),
    "script error": ("index.html", PAGE % "<script>undefinedFunction()</script>",
                     "script error"),
}


def write_site(site, fault=None):
    files = {"index.html": PAGE % "", "plot.png": png(40, 30),
             "other.html": '<html><body><p id="part">x</p></body></html>'}
    if fault:
        name, content, _ = FAULTS[fault]
        files[name] = content
    for name, content in files.items():
        with open(os.path.join(site, name), "wb") as f:
            f.write(content if isinstance(content, bytes) else content.encode())


def run(browser, site, shots):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "site-browser.py"),
                           browser, site, shots, "index.html"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout


def main(argv):
    browser, failed = argv[1], []
    with tempfile.TemporaryDirectory(prefix="test-site-browser-") as tmp:
        for fault in [None] + list(FAULTS):
            site = tempfile.mkdtemp(dir=tmp)
            write_site(site, fault)
            status, out = run(browser, site, os.path.join(tmp, "shots"))
            if fault is None:
                ok = status == 0 and "1 images decoded of 1" in out
            else:
                ok = status == 1 and FAULTS[fault][2] in out
            print("test-site-browser: %-17s %s" % (fault or "whole site", "ok" if ok else "WRONG"))
            if not ok:
                failed.append(fault or "whole site")
                print(out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
