#!/usr/bin/env bash
# What the embedded index's faster ranking function needs (adapters/sqlite/rank.py builds kb_rank.c at run
# time), installed by the test script (never by hand): a C compiler and SQLite's extension header (Debian's
# gcc and libsqlite3-dev). Without them the index ranks with FTS5's bm25(), the same scores, slower.
set -euo pipefail
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1 || [ ! -f /usr/include/sqlite3ext.h ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq gcc libc6-dev libsqlite3-dev >/dev/null
  else
    echo "kb_bm25 needs a C compiler and SQLite's extension header: sudo apt-get install gcc libsqlite3-dev" >&2
  fi
fi
