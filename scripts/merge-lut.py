#!/usr/bin/env python3
"""Merges tuner tables: per (C, T, output) the entry with the lowest kernel/copy ratio (each
against the copy measured in its own run). The first file's comment lines are kept; update
them by hand to name the runs merged.

usage: scripts/merge-lut.py kernels/lut/sm90.txt results/.../sm90.txt > merged.txt
"""
import sys


def entries(path):
    comments, rows = [], {}
    for line in open(path):
        if line.startswith("#") or not line.strip():
            comments.append(line.rstrip("\n"))
            continue
        f = line.split()
        c, t, out, kernel, copy = int(f[0]), int(f[1]), f[2], float(f[5]), float(f[6])
        rows[(c, t, out)] = (kernel / copy, line.rstrip("\n"))
    return comments, rows


def main():
    comments, best = entries(sys.argv[1])
    order = list(best)
    for path in sys.argv[2:]:
        for key, row in entries(path)[1].items():
            if key not in best:
                order.append(key)
            if key not in best or row[0] < best[key][0]:
                best[key] = row
    print("\n".join(comments))
    for key in order:
        print(best[key][1])


main()
