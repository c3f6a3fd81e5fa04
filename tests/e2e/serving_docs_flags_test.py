#!/usr/bin/env python3
"""docs/SERVING.md lists every flag of every serving binary: each `--flag` that a binary's
--help prints must appear in the doc's section for that binary, with the same default."""
import re
import subprocess
import sys


def main(argv):
    doc = open(argv[1]).read()
    failures = []
    for spec in argv[2:]:
        name, cmd = spec.split("=", 1)
        help_text = subprocess.run(cmd.split(), capture_output=True, text=True).stdout
        m = re.search(r"### `" + re.escape(name) + r"`.*?```text\n(.*?)```", doc, re.S)
        if not m:
            failures.append(f"no section for {name}")
            continue
        section = m.group(1)
        for flag in re.findall(r"^\s+(--[a-z_]+)(?:\s+(\S+))?", help_text, re.M):
            entry = flag[0] + (" " + flag[1] if flag[1] and "=" in flag[1] else "")
            if entry not in section:
                failures.append(f"{name}: {entry} missing or different in docs/SERVING.md")
    print("\n".join(failures) or "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
