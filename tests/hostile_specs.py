"""A corpus of hostile run specs, written on the spot (nothing committed but this script): each is a spec a user or a
tool could hand xlarun, and each must end in a documented exit code with a one-line error, never a crash (exit 4 or a
traceback), a hang, or a secret printed back. ``python tests/hostile_specs.py DIR`` writes them to look at."""

from __future__ import annotations

import os
import sys
from pathlib import Path

SECRET = "s3cr3t-TOKEN-value-do-not-print"
JOB = "print('ok')\n"

#: name -> spec text (bytes where it must not be text). "{job}" is the path of a tiny job script beside it.
SPECS: dict[str, bytes | str] = {
    "empty": "",
    "only-comments": "# nothing here\n",
    "not-a-mapping": "- a\n- b\n",
    "a-scalar": "just a string\n",
    "yaml-syntax": "name: [\n",
    "tabs": "name: t\n\tscript: {job}\n",
    "binary": b"\x00\x01\x02\xff\xfe name: x\n",
    "not-utf8": b"name: caf\xe9\nscript: {job}\n",
    "nul-in-name": 'name: "a\\0b"\nscript: {job}\n',
    "missing-script": "name: t\n",
    "missing-name": "script: {job}\n",
    "script-missing-file": "name: t\nscript: /nonexistent/job.py\n",
    "script-is-a-folder": "name: t\nscript: /tmp\n",
    "unknown-key": "name: t\nscript: {job}\nscirpt: x\n",
    "unknown-nested-key": "name: t\nscript: {job}\ndump:\n  pass_regex: '.*'\n",
    "wrong-type-timeout": "name: t\nscript: {job}\ntimeout: soon\n",
    "negative-timeout": "name: t\nscript: {job}\ntimeout: -5s\n",
    "huge-timeout": "name: t\nscript: {job}\ntimeout: 99999999999h\n",
    "args-not-a-list": "name: t\nscript: {job}\nargs: {{a: 1}}\n",
    "bad-regex": "name: t\nscript: {job}\ndump:\n  pass_re: '(unclosed'\n",
    "unknown-format": "name: t\nscript: {job}\ndump:\n  formats: [text, jpeg]\n",
    "unknown-backend": "name: t\nscript: {job}\nbackend: quantum\n",
    "unknown-framework": "name: t\nscript: {job}\nframework: caffe\n",
    "env-not-strings": "name: t\nscript: {job}\nenv: {{A: [1, 2]}}\n",
    "env-bad-name": "name: t\nscript: {job}\nenv: {{'A=B': x}}\n",
    "env-newline-flag": 'name: t\nscript: {job}\nenv: {{XLA_FLAGS: "--xla_a=1\\n--xla_b=2"}}\n',
    "secret-with-error": f"name: t\nscript: {{job}}\nenv: {{API_TOKEN: {SECRET}}}\ntimeout: soon\n",
    "secret-unknown-key": f"name: t\nscript: {{job}}\nenv: {{API_TOKEN: {SECRET}}}\nwhatever: 1\n",
    "name-traversal": "name: ../../etc/passwd\nscript: {job}\n",
    "name-control-chars": 'name: "\\e[31mred\\e[0m"\nscript: {job}\n',
    "name-10k": "name: " + "n" * 10_000 + "\nscript: {job}\n",
    "duplicate-keys": "name: a\nname: b\nscript: {job}\n",
    "alias-bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "name: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nscript: {job}\n",
    "deep-nesting": "name: t\nscript: {job}\nenv: " + "[" * 5000 + "]" * 5000 + "\n",
    "python-tag": "name: !!python/object/apply:os.system ['echo pwned']\nscript: {job}\n",
    "huge-file": "name: t\nscript: {job}\n# " + "x" * 20_000_000 + "\n",
    "matrix-empty": "name: t\nscript: {job}\nmatrix: {{}}\n",
    "matrix-huge": "name: t\nscript: {job}\nmatrix:\n  a: ["
    + ", ".join(map(str, range(1000)))
    + "]\n  b: ["
    + ", ".join(map(str, range(1000)))
    + "]\n",
    "image-injection": "name: t\nscript: {job}\nbackend: docker-cpu\nimage: 'x; rm -rf /'\n",
    "python-missing": "name: t\nscript: {job}\npython: /nonexistent/bin/python\n",
    # readers bounded in alias expansions, depth and bytes; bad values refused before anything is staged
    "alias-bomb-8-levels": "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}" if i else "lol"] * 9) + "]\n" for i in range(8))
    + "name: t\nscript: {job}\n",
    "alias-bomb-characters": "a: &a " + "x" * 200_000 + "\nname: t\nscript: {job}\nargs: [*a, *a, *a, *a, *a, *a]\n",
    "alias-chain-deep": "".join(f"a{i}: &a{i} [" + (f"*a{i - 1}" if i else "x") + "]\n" for i in range(60))
    + "name: t\nscript: {job}\n",
    "recursive-anchor": "name: &r [*r]\nscript: {job}\n",
    "recursive-merge": "name: t\nscript: {job}\nenv: &e {{<<: *e}}\n",
    "nul-in-script": 'name: t\nscript: "{job}\\0.py"\n',
    "nul-in-args": 'name: t\nscript: {job}\nargs: [ok, "a\\0b"]\n',
    "nul-in-env": f'name: t\nscript: {{job}}\nenv: {{{{API_TOKEN: "{SECRET}\\0"}}}}\n',
    "script-symlink-loop": "name: t\nscript: {loop}\n",
    "timeout-5000-digits": "name: t\nscript: {job}\ntimeout: " + "9" * 5000 + "\n",
    "timeout-400-digit-string": "name: t\nscript: {job}\ntimeout: '" + "9" * 400 + "h'\n",
    "timeout-true": "name: t\nscript: {job}\ntimeout: true\n",
    "timeout-inf": "name: t\nscript: {job}\ntimeout: .inf\n",
    "args-not-strings": "name: t\nscript: {job}\nargs: [1, {{a: b}}, null]\n",
    "env-required-unset": "name: t\nscript: {job}\nenv: {{A: '${{XLARUN_TORTURE_NEVER_SET:?set it first}}'}}\n",
    "unknown-substitution": "name: t\nscript: {job}\nargs: ['${{HOME:+x}}']\n",
    "impossible-date": "name: 2001-13-45\nscript: {job}\n",
    "explicit-tag-unbuildable": "name: t\nscript: {job}\ntags: {{t: !!timestamp 'x'}}\n",
    "script-name-too-long": "name: t\nscript: " + "a" * 300 + ".py\n",
    "matrix-value-bomb": "name: t\nscript: {job}\ntags: {{"
    + ", ".join(f"t{i}: '${{matrix.x}}'" for i in range(50))
    + "}}\nmatrix:\n  x: [["
    + ", ".join(["v"] * 1000)
    + "]]\n",
    "matrix-bad-cell": "name: t\nscript: {job}\ntimeout: ${{matrix.t}}\nmatrix:\n  t: [5, never]\n",
}

#: Spec paths that are not regular files (name -> what write_specs makes): each must be refused, never read or waited on.
NOT_FILES = ("spec-is-a-fifo", "spec-is-dev-zero", "spec-is-a-folder", "spec-in-a-symlink-loop")


def write_specs(folder: Path) -> dict[str, Path]:
    """Each hostile spec as ``folder/<name>.yaml``, beside the tiny job they name, and the paths of NOT_FILES; returns
    name -> path."""
    folder.mkdir(parents=True, exist_ok=True)
    job = folder / "job.py"
    job.write_text(JOB)
    loop = folder / "loop-a.py"
    if not loop.is_symlink():
        loop.symlink_to(folder / "loop-b.py")
        (folder / "loop-b.py").symlink_to(loop)
    paths = {}
    for name, text in SPECS.items():
        data = text.encode() if isinstance(text, str) else text
        data = data.replace(b"{job}", str(job).encode()).replace(b"{loop}", str(loop).encode())
        data = data.replace(b"{{", b"{").replace(b"}}", b"}")
        path = folder / f"{name}.yaml"
        path.write_bytes(data)
        paths[name] = path
    os.mkfifo(folder / "fifo.yaml")
    (folder / "loop-a.yaml").symlink_to(folder / "loop-b.yaml")
    (folder / "loop-b.yaml").symlink_to(folder / "loop-a.yaml")
    specials = (folder / "fifo.yaml", Path("/dev/zero"), folder, folder / "loop-a.yaml")
    paths.update(zip(NOT_FILES, specials, strict=True))
    return paths


if __name__ == "__main__":
    for name, path in write_specs(Path(sys.argv[1])).items():
        print(name, path)
