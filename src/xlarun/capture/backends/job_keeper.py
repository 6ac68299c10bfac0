"""The job's keeper: the process between xlarun and a local job, that no process of the job can leave.

xlarun starts the keeper (``python -I -S job_keeper.py``: the standard library only, no xlarun import, a few ms),
and the keeper starts the job, in a session of its own. On Linux the keeper is the job's **child subreaper**
(``prctl(PR_SET_CHILD_SUBREAPER)``): a process of the job whose parent ends is adopted by the keeper, not by init,
so every process the job ever starts stays below the keeper -- one in a new session (``setsid``), with a cleared
environment (``env -i``), double-forked, all of them. "The job's processes" are then simply the live processes
below the keeper (:func:`live_processes_below`): xlarun stops them when the job ends, times out or xlarun is
signalled, and the keeper itself SIGKILLs them when xlarun ends without doing so (``kill -9``), since xlarun
holds the write end of the keeper's stdin and nothing else does.

Why a subreaper and not a cgroup: creating a cgroup needs a writable, delegated cgroup v2 tree, which an
unprivileged user or a container rarely has (docker mounts ``/sys/fs/cgroup`` read-only; hosts still on cgroup
v1 have no single tree to write to); a subreaper needs no privilege, works in any container and on any Linux
since 3.4, and, being the keeper, outlives a kill -9 of xlarun. What it cannot hold is a process that escapes
the job's process tree altogether (a daemon started through another service, ``systemd-run``); a cgroup could,
where one is available, but no job that only forks and execs gets that far.

Where the keeper cannot become a subreaper (not Linux, or prctl refused), it still starts the job and reports
so; xlarun then also finds the job's processes by the mark in their environment
(:data:`xlarun.interrupts.JOB_MARK`), which a process that clears its environment drops.

What the keeper says, one line each on the file descriptor named by its third argument:
``pid PID SUBREAPER`` (the job started; SUBREAPER 1 or 0), ``error WORDS`` (it could not start: an OSError's
words, then the keeper exits), ``exit CODE`` (the job's main process ended: its code, minus the signal that
killed it, as ``subprocess`` gives it). What it reads on stdin: ``LENGTH\\n`` then LENGTH bytes, fields joined
by NUL: the working folder, the number of arguments, the arguments, then the environment's ``NAME=value``
entries (:func:`job_request`); then nothing until the end of the file, which means "stop everything and go".
"""

import _signal  # not `signal`, which imports enum (10 ms of the keeper's start)
import os
import select
import sys

PR_SET_CHILD_SUBREAPER = 36
#: How long the keeper goes on killing what it finds below itself once told to go (a process forking as fast as it can).
KILL_FOR_S = 10.0


def live_processes_below(root: int) -> list[int]:
    """Every process below ``root`` (its children, theirs, ...) that still runs (zombies left out); [] without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    children: dict[int, list[tuple[int, bytes]]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[-1].split()
            children.setdefault(int(fields[1]), []).append((int(name), fields[0]))
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
    found, todo = [], [root]
    while todo:
        for pid, state in children.get(todo.pop(), ()):
            todo.append(pid)
            if state not in (b"Z", b"X"):
                found.append(pid)
    return found


def job_request(argv: list[str], env: dict[str, str], cwd: str) -> bytes:
    """What xlarun writes on the keeper's stdin to start the job (see the module docstring)."""
    fields = [cwd, str(len(argv)), *argv, *(f"{name}={value}" for name, value in env.items())]
    payload = b"\0".join(os.fsencode(field) for field in fields)
    return b"%d\n" % len(payload) + payload


def _read_request(fd: int) -> tuple[list[str], dict[str, str], str]:
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 65536)
        if not chunk:
            raise EOFError
        data += chunk
    head, data = data.split(b"\n", 1)
    while len(data) < int(head):
        chunk = os.read(fd, 65536)
        if not chunk:
            raise EOFError
        data += chunk
    fields = [os.fsdecode(field) for field in data[: int(head)].split(b"\0")]
    count = int(fields[1])
    argv = fields[2 : 2 + count]
    env = dict(entry.split("=", 1) for entry in fields[2 + count :] if "=" in entry)
    return argv, env, fields[0]


def _become_subreaper() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _start_job(argv: list[str], env: dict[str, str], cwd: str) -> int:
    """Fork and exec the job in a new session, stdin from /dev/null, stdout and stderr ours; OSError if it cannot."""
    failed_r, failed_w = os.pipe()  # close-on-exec: an exec that works closes it, one that fails writes errno
    pid = os.fork()
    if pid == 0:
        try:
            os.close(failed_r)
            os.setsid()
            os.chdir(cwd)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            for sig in ("SIGPIPE", "SIGXFSZ"):  # Python ignores them; the job gets them as subprocess gives them
                if hasattr(_signal, sig):
                    _signal.signal(getattr(_signal, sig), _signal.SIG_DFL)
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:
            os.write(failed_w, b"%d" % (getattr(exc, "errno", None) or 0))
        os._exit(127)
    os.close(failed_w)
    failed = b""
    while chunk := os.read(failed_r, 64):
        failed += chunk
    os.close(failed_r)
    if failed:
        os.waitpid(pid, 0)
        code = int(failed)
        raise OSError(code, os.strerror(code) if code else "cannot start")
    return pid


class _Keeper:
    def __init__(self, status_fd: int):
        self.status_fd = status_fd
        self.job: int | None = None

    def say(self, line: str) -> None:
        try:
            os.write(self.status_fd, line.encode() + b"\n")
        except OSError:  # xlarun is gone: nobody to tell
            pass

    def reap(self) -> bool:
        """Reap every child that ended (the job says its exit code); whether any child is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            except InterruptedError:
                continue
            if pid == 0:
                return True
            if pid == self.job:
                self.say(f"exit {os.waitstatus_to_exitcode(status)}")

    def kill_everything_below(self) -> None:
        import time

        deadline = time.monotonic() + KILL_FOR_S
        while time.monotonic() < deadline:
            pids = live_processes_below(os.getpid())
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, _signal.SIGKILL)
                except OSError:
                    pass
            self.reap()
            time.sleep(0.01)


def main(args: list[str]) -> None:
    """``job_keeper.py MARK RUN_DIR STATUS_FD`` (MARK and RUN_DIR only name the job in ``ps``)."""
    keeper = _Keeper(int(args[2]))
    os.set_inheritable(keeper.status_fd, False)
    subreaper = _become_subreaper()
    woken_r, woken_w = os.pipe()
    os.set_blocking(woken_w, False)
    _signal.signal(_signal.SIGCHLD, lambda _signum, _frame: None)
    _signal.set_wakeup_fd(woken_w)  # a child's end wakes the poll below
    try:
        argv, env, cwd = _read_request(0)
        keeper.job = _start_job(argv, env, cwd)
    except EOFError:
        os._exit(0)  # xlarun went before saying what to run
    except OSError as exc:
        keeper.say(f"error {exc.strerror or exc}")
        os._exit(0)
    keeper.say(f"pid {keeper.job} {int(subreaper)}")
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # after the fork: the job gets xlarun's dispositions, not these
        _signal.signal(getattr(_signal, name), _signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)  # the job's output pipes are the job's alone: they close when its last process does
    os.dup2(devnull, 2)
    poll = select.poll()
    poll.register(0, select.POLLIN)
    poll.register(woken_r, select.POLLIN)
    while True:
        keeper.reap()
        events = dict(poll.poll())
        if woken_r in events:
            os.read(woken_r, 4096)
        if 0 in events and not os.read(0, 4096):
            break  # xlarun ended the job, or ended
    keeper.kill_everything_below()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
