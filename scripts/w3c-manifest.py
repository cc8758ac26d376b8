#!/usr/bin/env python3
"""Builds a W3C SCXML IRP suite folder for `viastack spec conformance` (docs/spec-format.md).

Reads the W3C `manifest.xml` (the Implementation Report Plan's list of assertions and tests)
and writes the `manifest.json` the runner reads: one entry per *automatic* test
(`manual="false"`) with `id`, `specid`, `conformance`, `start` (file names), `deps` (file
names) and `assertion` (the assertion text). With `--txml DIR`, it also copies every file
named by a `start` or `dep` from DIR into OUT/txml/.

Usage:
    scripts/w3c-manifest.py MANIFEST.xml OUT_DIR [--txml TXML_DIR]

Python 3 standard library only. The W3C files are test data: keep OUT_DIR outside the
repository.
"""

import argparse
import json
import os
import shutil
import sys
import xml.etree.ElementTree as ET


def basename(uri):
    return uri.rsplit("/", 1)[-1]


def convert(root):
    out = []
    for assertion in root.iter("assert"):
        text = " ".join((assertion.text or "").split())
        for test in assertion.findall("test"):
            if test.get("manual", "false") != "false":
                continue
            out.append(
                {
                    "id": test.get("id", assertion.get("id", "")),
                    "specid": assertion.get("specid", ""),
                    "conformance": test.get("conformance", ""),
                    "start": [basename(s.get("uri", "")) for s in test.findall("start")],
                    "deps": [basename(d.get("uri", "")) for d in test.findall("dep")],
                    "assertion": text,
                }
            )
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("manifest", help="the W3C manifest.xml")
    ap.add_argument("out", help="the suite folder to write (manifest.json, txml/)")
    ap.add_argument("--txml", help="folder holding the .txml files to copy into OUT/txml")
    args = ap.parse_args()
    try:
        root = ET.parse(args.manifest).getroot()
    except (OSError, ET.ParseError) as e:
        sys.exit(f"{args.manifest}: {e}")
    tests = convert(root)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(tests, f, indent=1, ensure_ascii=False)
        f.write("\n")
    if args.txml:
        dst = os.path.join(args.out, "txml")
        os.makedirs(dst, exist_ok=True)
        missing = []
        for t in tests:
            for name in t["start"] + t["deps"]:
                src = os.path.join(args.txml, name)
                if os.path.exists(src):
                    shutil.copyfile(src, os.path.join(dst, name))
                else:
                    missing.append(name)
        if missing:
            sys.exit(f"{args.txml}: missing {', '.join(sorted(set(missing)))}")
    print(f"{len(tests)} automatic tests written to {args.out}/manifest.json")


if __name__ == "__main__":
    main()
