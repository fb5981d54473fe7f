#!/usr/bin/env python3
"""make_fixtures_fss.py -- reference fractions skill scores (Roberts and Lean
2008) for tests/testthat/test-fss.R, computed the way pysteps'
pysteps.verification.spatialscores computes them (fss_init, fss_accum over
fields, fss_compute), written here in numpy without the package code:

  events     I = (X >= thr), 0 or 1
  fractions  S[i, j] = mean of I over rows i - s//2 .. i - s//2 + s - 1 and
             columns j - s//2 .. j - s//2 + s - 1, cells outside the field
             0 (scipy.ndimage.uniform_filter(I, size=s, mode="constant",
             cval=0.0) places the window so, for odd and even s alike)
  accumulate sum_fct_sq += sum(S_f^2), sum_fct_obs += sum(S_f S_o),
             sum_obs_sq += sum(S_o^2) over every (sequence, channel) field
  FSS        1 - (sum_fct_sq - 2 sum_fct_obs + sum_obs_sq)
                 / (sum_fct_sq + sum_obs_sq)

scipy is not needed (Debian's /usr/bin/python3 here has none): the
fractions are counted window by window with explicit loops, an independent
route from the R code's running sums.

Fields (numpy RandomState(2008)), [n, time, channels, height, width] as
forecast_metrics() takes them, values multiples of 0.5 in [0, 4] so that
thresholds fall on values (>= and > differ):
  a: n 2, time 2, 1 channel, 5 x 7; thresholds 1, 2.5; scales 1, 2, 3, 4, 5, 6, 9
  b: n 1, time 3, 2 channels, 6 x 4; thresholds 0.5, 3; scales 1, 2, 3, 7
Per frame the sums run over the sequences and channels; "all" over every
frame too.

Output (argument: the folder, default tests/testthat/fixtures/fss):
  fields.csv  case,array,seq,frame,channel,row,col,value (1-based)
  fss.csv     case,threshold,scale,frame,fss (frame "all": every frame)
Values with repr() (shortest exact). Run: /usr/bin/python3
tools/make_fixtures_fss.py; tools/fixtures_check.sh reruns and diffs it.
"""
import os
import sys

import numpy as np

CASES = [
    ("a", (2, 2, 1, 5, 7), [1.0, 2.5], [1, 2, 3, 4, 5, 6, 9]),
    ("b", (1, 3, 2, 6, 4), [0.5, 3.0], [1, 2, 3, 7]),
]


def fractions(events, s):
    h, w = events.shape
    out = np.zeros((h, w))
    for i in range(h):
        for j in range(w):
            count = 0
            for r in range(i - s // 2, i - s // 2 + s):
                for c in range(j - s // 2, j - s // 2 + s):
                    if 0 <= r < h and 0 <= c < w:
                        count += int(events[r, c])
            out[i, j] = count / float(s * s)
    return out


def fss_of(pairs, thr, s):
    acc = dict(sum_fct_sq=0.0, sum_fct_obs=0.0, sum_obs_sq=0.0)
    for xf, xo in pairs:
        sf = fractions(xf >= thr, s)
        so = fractions(xo >= thr, s)
        acc["sum_fct_sq"] += np.sum(sf ** 2)
        acc["sum_fct_obs"] += np.sum(sf * so)
        acc["sum_obs_sq"] += np.sum(so ** 2)
    numer = acc["sum_fct_sq"] - 2.0 * acc["sum_fct_obs"] + acc["sum_obs_sq"]
    denom = acc["sum_fct_sq"] + acc["sum_obs_sq"]
    return float("nan") if denom == 0 else 1.0 - numer / denom


def main(argv):
    out = argv[0] if argv else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "testthat", "fixtures", "fss")
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(2008)
    fields = ["case,array,seq,frame,channel,row,col,value"]
    scores = ["case,threshold,scale,frame,fss"]
    for name, shape, thresholds, scales in CASES:
        arrays = {}
        for which in ("forecast", "observed"):
            a = rng.randint(0, 9, size=shape) / 2.0
            arrays[which] = a
            for idx in np.ndindex(*shape):
                fields.append("%s,%s,%s,%r" % (name, which, ",".join(str(k + 1) for k in idx),
                                               float(a[idx])))
        n, t, c = shape[:3]
        fc, ob = arrays["forecast"], arrays["observed"]
        for thr in thresholds:
            for s in scales:
                for frame in list(range(t)) + ["all"]:
                    frames = range(t) if frame == "all" else [frame]
                    pairs = [(fc[i, f, k], ob[i, f, k]) for f in frames for i in range(n)
                             for k in range(c)]
                    label = frame if frame == "all" else str(frame + 1)
                    scores.append("%s,%r,%d,%s,%r" % (name, thr, s, label, fss_of(pairs, thr, s)))
    for fn, lines in (("fields.csv", fields), ("fss.csv", scores)):
        with open(os.path.join(out, fn), "w") as f:
            f.write("\n".join(lines) + "\n")
    print("make_fixtures_fss: %d field values, %d scores in %s" % (
        len(fields) - 1, len(scores) - 1, out))


if __name__ == "__main__":
    main(sys.argv[1:])
