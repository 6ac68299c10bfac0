"""The console script's exit without the interpreter's teardown still does what a program counts on at exit."""

from __future__ import annotations

import os
import subprocess
import sys

CHILD = """
import atexit, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
out = Path(sys.argv[1])

def late():
    time.sleep(0.3)
    (out / "thread").write_text("joined")

threading.Thread(target=late).start()  # not a daemon: waited for, as at any exit
atexit.register(lambda: (out / "atexit").write_text("ran"))
pool = ThreadPoolExecutor(2)  # never shut down: its idle workers must not hold the exit
pool.submit(int).result()
sys.stdout.write("no newline, not flushed")
from xlarun.process_exit import exit_without_teardown
exit_without_teardown(7)
"""


def test_threads_are_joined_atexit_handlers_run_output_is_flushed_and_the_code_kept(tmp_path):
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, done.stderr
    assert done.stdout == "no newline, not flushed"
    assert (tmp_path / "thread").read_text() == "joined"
    assert (tmp_path / "atexit").read_text() == "ran"


def test_a_closed_pipe_does_not_change_the_exit_code(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.replace('"no newline, not flushed"', '"x" * 100'), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},  # the output waits in its buffer
    )
    assert child.stdout is not None
    child.stdout.close()  # as `xlarun runs | head` does once it has its lines
    _, err = child.communicate(timeout=60)
    assert child.returncode == 7, err
    assert (tmp_path / "atexit").read_text() == "ran"


WAL_CHILD = """
import sys, threading
from pathlib import Path
from xlarun.store.pack_table import open_wal
db = Path(sys.argv[1]) / "table.sqlite"
made = []

def write():  # as an archiver's worker thread does: its connection is never closed by the code that opened it
    conn = open_wal(db, lambda c: c.execute("CREATE TABLE IF NOT EXISTS t (v TEXT)"))
    conn.execute("INSERT INTO t VALUES ('written by a worker')")
    made.append(conn)

worker = threading.Thread(target=write)
worker.start()
worker.join()
assert (db.parent / "table.sqlite-wal").exists()
from xlarun.process_exit import exit_without_teardown
exit_without_teardown(0)
"""


def test_every_wal_connection_is_closed_at_exit_so_its_rows_are_in_the_database_file_itself(tmp_path):
    """A worker thread's index or pack-table connection left open: the exit checkpoints it, so a reader that opens
    the file alone (a full disk, where SQLite can make no side files) sees the rows, and no -wal file is left."""
    import sqlite3

    done = subprocess.run([sys.executable, "-c", WAL_CHILD, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "table.sqlite-wal").exists()
    conn = sqlite3.connect(f"file:{tmp_path / 'table.sqlite'}?immutable=1", uri=True)
    assert conn.execute("SELECT v FROM t").fetchall() == [("written by a worker",)]
    conn.close()
