"""Prints the five tables of docs/benchmarks.md's Results from the tables `bench.py report` wrote.

    python3 bench/bench.py report FILES...   # writes bench/results/tables.md
    python3 bench/docs_tables.py [bench/results/tables.md]

The report's tables carry every column; the docs show five views of them: time to converge, where the
time goes, writes and events, the operator's memory and CPU (a sharded operator's replicas each, then
together), and the cluster's CPU per phase.
"""

import sys
from pathlib import Path

SHARDED_SUFFIX = " (RSS, CPU: their sum)"


def tables(text):
    """The report's Markdown tables, in order, each as its header and rows of cells."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("| N |"):
            current = [line]
            found.append(current)
        elif current is not None and line.startswith("|"):
            current.append(line)
        else:
            current = None
    return [(cells(t[0]), [cells(row) for row in t[2:]]) for t in found]


def cells(line):
    return [text.strip() for text in line.strip("|").split("|")]


def name(operator):
    return operator.replace(SHARDED_SUFFIX, "")


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main():
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/tables.md")
    (main_header, main), (_, processes), (where_header, where), (cpu_header, cpu) = tables(source.read_text())[:4]

    def column(row, title, nth=0):
        return row[[i for i, h in enumerate(main_header) if h == title][nth]]

    print("### Time to converge\n")
    print(table(["N", "operator", "runs", "create (s)", "× plain", "scale (s)", "× plain"],
                [[r[0], name(r[1]), column(r, "runs"), column(r, "create (s)"), column(r, "× plain"),
                  column(r, "scale (s)"), column(r, "× plain", 1)] for r in main]))
    print("\n### Where the time goes\n")
    print(table(where_header, [[r[0], name(r[1]), *r[2:]] for r in where]))
    print("\n### Writes and events\n")
    print(table(["N", "operator", "own writes/CR: create", "own writes/CR: scale", "events/CR (create + scale)",
                 "idle: own writes", "idle: events"],
                [[r[0], name(r[1]), column(r, "own writes/CR: create"), column(r, "scale"),
                  column(r, "events/CR (create+scale)"), column(r, "idle: own writes"), column(r, "idle: events")]
                 for r in main]))
    print("\n### The operator's memory and CPU\n")
    by_operator = {(r[0], name(r[1])): r for r in main}
    rows = []
    for r in processes:
        n, operator, replicas = r[0], name(r[1]), r[2]
        rows.append([n, operator + (", each" if replicas != "1" else ""), *r[4:12]])
        if replicas != "1":
            together = by_operator[(n, operator)]
            rows.append([n, operator + ", together", column(together, "peak RSS (MiB)"), "", "", "",
                         column(together, "CPU (s)"), "", "", ""])
    print(table(["N", "operator", "peak RSS (MiB)", "largest ÷ rust", "anonymous (MiB)", "file pages (MiB)",
                 "CPU (s)", "largest ÷ rust", "received over TCP (MiB)", "largest ÷ rust"], rows))
    print("\n### What each phase cost the cluster in CPU\n")
    print(table(cpu_header, [[r[0], name(r[1]), *r[2:]] for r in cpu]))


if __name__ == "__main__":
    main()
