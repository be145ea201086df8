#!/usr/bin/env python3
"""The folder graph of src/ and cli/, checked against the declared layers.

Each folder of src/ (and cli/) sits on one level of LEVELS, top first. A file may include, or
call into, its own folder and any folder on a lower level; never a folder on its own level
(siblings stay independent) nor on a higher one. Two graphs are checked:
  - includes: every #include "folder/file.h" in the sources;
  - symbols (with --build DIR): every function or variable an object file of the library or
    the CLI uses, by the folder of the object that defines it (`nm`), which also catches a
    call through a prototype declared low and defined high.

  tools/layering.py [--build BUILD_DIR] [--quiet]

prints each graph as `folder -> target(count) ...` and every violation as
`file: includes|uses target (folder level > own level)`; exits 1 on any violation.
docs/ARCHITECTURE.md draws the same levels.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

# Top first; folders on one line are siblings.
LEVELS = [
    ["cli"],
    ["run"],
    ["train", "plan"],
    ["predict"],
    ["parallel"],
    ["io"],
    ["models", "optim", "data"],
    ["graph"],
    ["layers"],
    ["dag"],
    ["backends"],
    ["cpu", "cuda"],
    ["core"],
]
LEVEL = {f: i for i, row in enumerate(LEVELS) for f in row}
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]+"')


def folder_of(rel):
    """The layer folder of a path relative to the repository root, or None."""
    parts = rel.split(os.sep)
    if parts[0] == "cli":
        return "cli"
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    return None


def allowed(src, dst):
    return src == dst or LEVEL[dst] > LEVEL[src]


def source_files():
    for top in ("src", "cli"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(d, f), ROOT)


def include_edges():
    """(source folder, target folder, where) for every cross-folder include."""
    for rel in source_files():
        src = folder_of(rel)
        with open(os.path.join(ROOT, rel), errors="replace") as fh:
            for no, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in LEVEL and m.group(1) != src:
                    yield src, m.group(1), f"{rel}:{no}"


def object_files(build):
    """(folder, path) of every object file of the library and the CLI in a CMake build tree."""
    for target in ("qsync.dir", "qsync_cli.dir"):
        base = os.path.join(build, "CMakeFiles", target)
        for d, _, files in os.walk(base):
            for f in files:
                if f.endswith(".o"):
                    rel = os.path.relpath(os.path.join(d, f), base)
                    folder = folder_of(rel)
                    if folder and os.path.exists(os.path.join(ROOT, rel[: -len(".o")])):  # not a stale object
                        yield folder, os.path.join(d, f), rel[: -len(".o")]


def symbol_edges(build):
    """(source folder, target folder, where) for every symbol an object uses from another folder."""
    defined, used = {}, []
    for folder, path, rel in object_files(build):
        out = subprocess.run(["nm", "--defined-only", "-g", path], capture_output=True, text=True).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] not in "wWvV":
                defined.setdefault(fields[2], folder)
        out = subprocess.run(["nm", "-u", path], capture_output=True, text=True).stdout
        used.append((folder, rel, [l.split()[-1] for l in out.splitlines() if l.strip()]))
    for folder, rel, symbols in used:
        for sym in symbols:
            dst = defined.get(sym)
            if dst and dst != folder:
                yield folder, dst, f"{rel}: {sym}"


def report(kind, edges, quiet):
    graph = collections.defaultdict(collections.Counter)
    bad = []
    for src, dst, where in edges:
        graph[src][dst] += 1
        if src not in LEVEL:
            bad.append(f"{where}: folder '{src}' has no level in tools/layering.py")
        elif not allowed(src, dst):
            bad.append(f"{where}: {kind} {dst} (level {LEVEL[dst]}) from {src} (level {LEVEL[src]})")
    if not quiet:
        print(f"{kind} graph (level: folder -> target(count)):")
        for src in sorted(graph, key=lambda f: (LEVEL.get(f, -1), f)):
            targets = " ".join(f"{d}({n})" for d, n in sorted(graph[src].items(), key=lambda x: (LEVEL[x[0]], x[0])))
            print(f"  {LEVEL.get(src, '?'):>2}: {src} -> {targets}")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="a CMake build tree: also check the symbols its object files use")
    ap.add_argument("--quiet", action="store_true", help="print only violations")
    a = ap.parse_args()
    missing = sorted({folder_of(r) for r in source_files()} - set(LEVEL) - {None})
    bad = [f"src/{m}: folder has no level in tools/layering.py" for m in missing]
    bad += report("includes", include_edges(), a.quiet)
    if a.build:
        if not os.path.isdir(os.path.join(a.build, "CMakeFiles", "qsync.dir")):
            sys.exit(f"layering: {a.build} is not a qsync build tree (no CMakeFiles/qsync.dir)")
        bad += report("uses", symbol_edges(a.build), a.quiet)
    for b in bad:
        print("layering violation: " + b)
    if bad:
        print(f"{len(bad)} violation(s): a folder may depend only on folders below it (tools/layering.py LEVELS, "
              "docs/ARCHITECTURE.md)")
        return 1
    if not a.quiet:
        print("layering: no upward or sideways dependency")
    return 0


if __name__ == "__main__":
    sys.exit(main())
