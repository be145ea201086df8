#!/usr/bin/env python3
"""Files and functions over the house limits (docs/ARCHITECTURE.md, "Code that others can live in").

  tools/sizes.py [--files N] [--functions N] [PATH ...]   (default: src/, limits 600 and 80 lines)

A function is a definition whose opening brace closes a line at column 0 or after a top-level
signature, up to the matching closing brace at column 0; a function that is one initializer
table (its body is mostly a brace-enclosed list) is reported apart as a table, not as a violation.
Exits 1 when any file or function is over its limit.
"""
import argparse
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
EXT = (".c", ".h", ".cu", ".cuh")


def functions(lines):
    """(name, first line, length) of every top-level function definition: a line at brace depth
    0 that ends with "{" after a ")" and assigns nothing, up to the brace that closes it."""
    depth, i = 0, 0
    while i < len(lines):
        line = lines[i]
        code = line.split("//")[0].rstrip()
        opens = depth == 0 and code.endswith("{") and ")" in code and "=" not in code.split("(")[0] \
            and not code.lstrip().startswith(("typedef", "struct", "enum", "union", "#", "extern \"C\""))
        if opens:
            start = i
            while start > 0 and lines[start - 1].strip() and \
                    not lines[start - 1].rstrip().endswith((";", "}", "*/", "{")) and \
                    not lines[start - 1].lstrip().startswith(("#", "/*", "*", "//")):
                start -= 1
            d, j = 0, i
            while j < len(lines):
                d += lines[j].count("{") - lines[j].count("}")
                if d <= 0:
                    break
                j += 1
            names = [n for n in re.findall(r"(\w+)\s*\(", " ".join(l.strip() for l in lines[start:i + 1]))
                     if n not in ("__launch_bounds__", "__attribute__", "format", "printf")]
            yield (names[0] if names else "?"), start + 1, j - start + 1
            i = j + 1
            continue
        depth += code.count("{") - code.count("}")
        depth = max(depth, 0)
        i += 1


def is_table(body):
    """Whether a function body is mostly a static initializer table."""
    return sum(1 for l in body if l.strip().startswith(("{", "[", '"', "X(", "QS_OP")) or l.strip().endswith("},")) > \
        len(body) // 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=600)
    ap.add_argument("--functions", type=int, default=80)
    ap.add_argument("paths", nargs="*", default=["src"])
    a = ap.parse_args()
    bad = 0
    for top in a.paths:
        top = os.path.join(ROOT, top) if not os.path.isabs(top) else top
        walk = [(os.path.dirname(top), None, [os.path.basename(top)])] if os.path.isfile(top) else os.walk(top)
        for d, _, files in walk:
            for f in sorted(files):
                if not f.endswith(EXT):
                    continue
                p = os.path.join(d, f)
                rel = os.path.relpath(p, ROOT)
                lines = open(p, errors="replace").read().split("\n")
                if len(lines) - 1 > a.files:
                    print(f"{rel}: {len(lines) - 1} lines (limit {a.files})")
                    bad += 1
                for name, first, n in functions(lines):
                    if n > a.functions:
                        if is_table(lines[first - 1:first - 1 + n]):
                            print(f"{rel}:{first}: {name}: {n} lines, a table (allowed)")
                        else:
                            print(f"{rel}:{first}: {name}: {n} lines (limit {a.functions})")
                            bad += 1
    print(f"{bad} over the limits" if bad else "sizes: every file and function within the limits")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
