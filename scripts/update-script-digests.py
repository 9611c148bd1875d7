#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
"""Rewrites the SHA-1 digest after each Lua script body in include/redlock/detail/scripts.hpp.

After editing a script, run it; `core_test` (scripts.every_digest_is_the_sha1_of_its_body) checks
the result without a server. Usage: scripts/update-script-digests.py [HEADER]
"""
import hashlib
import re
import sys
from pathlib import Path

header = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent.parent / "include/redlock/detail/scripts.hpp")
text = header.read_text()
pattern = re.compile(r'(R"\()(.*?)(\)",\s*")([0-9a-f]{40})(")', re.S)
changed = 0


def fix(m):
    global changed
    digest = hashlib.sha1(m.group(2).encode()).hexdigest()
    changed += digest != m.group(4)
    return m.group(1) + m.group(2) + m.group(3) + digest + m.group(5)


header.write_text(pattern.sub(fix, text))
print(f"{header}: {changed} digest(s) updated")
