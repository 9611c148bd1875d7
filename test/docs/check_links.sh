#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Every relative link in the repository's Markdown files must point at an existing file, so that
# the README and docs/ do not rot as files move. External (http, mailto) and anchor links are skipped.
set -euo pipefail
cd "$1"
bad=0
while IFS= read -r md; do
  dir=$(dirname "$md")
  # [text](target) pairs; images too. Strip any #anchor.
  while IFS= read -r target; do
    target=${target%%#*}
    [[ -z "$target" || "$target" =~ ^[a-z]+: ]] && continue
    if [[ ! -e "$dir/$target" ]]; then
      echo "$md: broken link to $target"
      bad=1
    fi
  done < <(grep -oE '\]\([^) ]+\)' "$md" | sed -E 's/^\]\((.*)\)$/\1/')
done < <(git ls-files '*.md' 2>/dev/null || find . -name '*.md' -not -path './build/*')
exit $bad
