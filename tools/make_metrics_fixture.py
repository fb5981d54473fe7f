#!/usr/bin/env python3
"""make_metrics_fixture.py -- reference SSIM and PSNR values from scikit-image
for tests/testthat/test-metrics.R, so the tests (and CI) need no scikit-image.

Fixed arrays (numpy RandomState(2015)): `forecast` and `observed`, frames
[n = 2, time = 3, channels, 16, 16] as forecast_metrics() takes them, once
with 1 channel and values in [0, 1], once with 2 channels and values in
[0, 2], all multiples of 1/256. For every sequence and frame it records what
skimage.metrics.structural_similarity returns with

  uniform7:  data_range = 1, win_size = 7, gaussian_weights = False
  uniform5:  data_range = 1, win_size = 5, gaussian_weights = False
  gaussian:  data_range = 1, gaussian_weights = True, sigma = 1.5
  (all: use_sample_covariance = True, K1 = 0.01, K2 = 0.03, the defaults)

(for the 2-channel case data_range = 2 and channel_axis over the channels)
and skimage.metrics.peak_signal_noise_ratio with the same data_range.

Output: tests/testthat/fixtures/metrics_skimage.txt, one line per array:
  <name> <dim...> : <values, C order, 17 significant digits>
Run: /usr/bin/python3 tools/make_metrics_fixture.py (scikit-image 0.19,
Debian's python3-skimage).
"""
import os

import numpy as np
import skimage
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "testthat", "fixtures",
                   "metrics_skimage.txt")
SETTINGS = {
    "uniform7": dict(win_size=7, gaussian_weights=False),
    "uniform5": dict(win_size=5, gaussian_weights=False),
    "gaussian": dict(gaussian_weights=True, sigma=1.5),
}


def smooth_pair(rng, shape, scale):
    # blobs plus noise, so that means, variances and covariances all vary
    obs = rng.uniform(0, 1, shape)
    obs[..., 4:10, 3:12] += 1.0
    obs = np.clip(obs / obs.max(), 0, 1) * scale
    fc = np.clip(obs + rng.normal(0, 0.15 * scale, shape), 0, scale)
    # multiples of 1/256: exact in binary and short in the text file
    return np.round(fc * 256) / 256, np.round(obs * 256) / 256


def main():
    rng = np.random.RandomState(2015)
    lines = ["# skimage %s; see tools/make_metrics_fixture.py" % skimage.__version__]

    def put(name, a):
        a = np.asarray(a, dtype=np.float64)
        vals = " ".join("%.17g" % v for v in a.ravel(order="C"))
        lines.append("%s %s : %s" % (name, " ".join(str(d) for d in a.shape), vals))

    for case, channels, scale in (("c1", 1, 1.0), ("c2", 2, 2.0)):
        fc, obs = smooth_pair(rng, (2, 3, channels, 16, 16), scale)
        put(case + "_forecast", fc)
        put(case + "_observed", obs)
        for name, kw in SETTINGS.items():
            ssim = np.zeros((2, 3))
            for i in range(2):
                for t in range(3):
                    a, b = fc[i, t], obs[i, t]  # [channels, 16, 16]
                    if channels == 1:
                        ssim[i, t] = structural_similarity(a[0], b[0], data_range=scale, **kw)
                    else:
                        ssim[i, t] = structural_similarity(a, b, data_range=scale,
                                                           channel_axis=0, **kw)
            put("%s_ssim_%s" % (case, name), ssim)
        psnr = np.array([[peak_signal_noise_ratio(obs[i, t], fc[i, t], data_range=scale)
                          for t in range(3)] for i in range(2)])
        put(case + "_psnr", psnr)
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
