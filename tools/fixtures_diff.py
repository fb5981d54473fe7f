#!/usr/bin/python3
"""fixtures_diff.py -- compares regenerated fixtures with the shipped ones
(make fixtures-check): every folder with a manifest.txt under SHIPPED must
be in NEW and the other way round; their config and tensor records must be
equal line for line; each tensor's bytes equal, or, where another CPU's
PyTorch kernels round differently, within float32 noise
(max |new - shipped| <= 1e-5 max |shipped| + 1e-7, and said so; for the
half-precision folders of HALF_NOISE, their rounding's noise); info
records (versions, float32 vs float64 figures) are printed when they
differ, not failed. CSV files (lr_schedules) are compared by value, to
1e-12 relative.

Usage: python3 tools/fixtures_diff.py SHIPPED NEW [SUBFOLDER...]
  SUBFOLDER: compare only these folders under both (default: all of NEW's)
Exit status 1 on any difference beyond those.
"""
import array
import csv
import os
import sys


def manifests(root):
    out = set()
    for d, _, files in os.walk(root):
        if "manifest.txt" in files:
            out.add(os.path.relpath(d, root))
    return out


def floats(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


# Folders whose generator runs PyTorch's CPU autocast (bfloat16) or rounds
# to float16 between float32 convolutions: their kernels round a sum to a
# half type, where another CPU's PyTorch (another oneDNN kernel, with or
# without AVX512_BF16) may round the other way by one unit of 2^-8 (2^-11),
# which a training step carries on. Their tensors are compared to this
# fraction of their largest value; their records still line for line.
HALF_NOISE = {"bf16": 3e-2, "forecaster_half": 3e-2}


def noise_of(name):
    top = name.split(os.sep)[0]
    return HALF_NOISE.get(top, 1e-5)


def compare_folder(shipped, new, name, report):
    read = lambda r: open(os.path.join(r, name, "manifest.txt")).read().splitlines()  # noqa: E731
    a, b = read(shipped), read(new)
    strict = lambda ls: [l for l in ls if not l.startswith("info ")]  # noqa: E731
    if strict(a) != strict(b):
        report(True, "%s: config or tensor records differ:\n  shipped %s\n  new     %s" % (
            name, sorted(set(strict(a)) - set(strict(b)))[:5],
            sorted(set(strict(b)) - set(strict(a)))[:5]))
        return
    info_a = [l for l in a if l.startswith("info ")]
    info_b = [l for l in b if l.startswith("info ")]
    if info_a != info_b:
        report(False, "%s: info records differ (not a failure): %s" % (
            name, sorted(set(info_b) - set(info_a))[:4]))
    noisy = []
    for line in strict(a):
        rec = line.split(" ")
        if rec[0] != "tensor":
            continue
        pa, pb = (os.path.join(r, name, rec[2]) for r in (shipped, new))
        with open(pa, "rb") as f, open(pb, "rb") as g:
            if f.read() == g.read():
                continue
        x, y = floats(pa), floats(pb)
        if len(x) != len(y):
            report(True, "%s: %s has %d values, shipped %d" % (name, rec[1], len(y), len(x)))
            continue
        scale = max((abs(v) for v in x), default=0.0)
        worst = max(abs(u - v) for u, v in zip(x, y))
        if worst <= noise_of(name) * scale + 1e-7:
            noisy.append("%s (%.2g)" % (rec[1], worst / scale if scale else worst))
        else:
            report(True, "%s: %s differs by %.3g (largest |shipped| %.3g)" % (
                name, rec[1], worst, scale))
    if noisy:
        report(False, "%s: within %s noise, not bit for bit: %s" % (
            name, "half-precision" if noise_of(name) > 1e-5 else "float32", ", ".join(noisy)))


def compare_csv(pa, pb, name, report):
    with open(pa) as f, open(pb) as g:
        ra, rb = list(csv.reader(f)), list(csv.reader(g))
    if len(ra) != len(rb) or any(len(u) != len(v) for u, v in zip(ra, rb)):
        report(True, "%s: rows or columns differ" % name)
        return
    for u, v in zip(ra, rb):
        for s, t in zip(u, v):
            if s == t:
                continue
            try:
                fs, ft = float(s), float(t)
            except ValueError:
                report(True, "%s: %r vs %r" % (name, s, t))
                return
            if abs(fs - ft) > 1e-12 * max(abs(fs), 1e-300):
                report(True, "%s: %s vs %s" % (name, s, t))
                return


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    shipped, new, only = argv[0], argv[1], argv[2:]
    failures = []

    def report(fail, msg):
        print(("FAIL " if fail else "note ") + msg)
        if fail:
            failures.append(msg)

    subs = only or ["."]
    n = 0
    for sub in subs:
        a, b = manifests(os.path.join(shipped, sub)), manifests(os.path.join(new, sub))
        for name in sorted(a - b):
            report(True, "%s: shipped, not regenerated" % os.path.join(sub, name))
        for name in sorted(b - a):
            report(True, "%s: regenerated, not shipped" % os.path.join(sub, name))
        for name in sorted(a & b):
            compare_folder(shipped, new, os.path.normpath(os.path.join(sub, name)), report)
            n += 1
        for d, _, files in os.walk(os.path.join(new, sub)):
            for fn in files:
                if fn.endswith(".csv"):
                    rel = os.path.relpath(os.path.join(d, fn), new)
                    pa = os.path.join(shipped, rel)
                    if not os.path.exists(pa):
                        report(True, "%s: regenerated, not shipped" % rel)
                    else:
                        compare_csv(pa, os.path.join(d, fn), rel, report)
                        n += 1
    print("fixtures: %d compared, %d differ" % (n, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
