"""A team store on S3-compatible object storage: where remotes are named, and the few object calls xlarun makes.

A remote is named once (``xlarun remote add team s3://bucket/prefix --endpoint URL``) in the user's config,
``$XDG_CONFIG_HOME/xlarun/remotes.json`` (default ``~/.config/xlarun/remotes.json``), not in a store: a remote names a
team's bucket, which every store of its user (and every checkout) pushes to, and it outlives any one store. The file
holds names, URLs and endpoints only. Credentials come from where boto3 looks for them (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws/credentials``, an instance role) and are never written by xlarun,
nor named in an error. boto3 is imported only here and only when a remote is used (``pip install 'xlarun[remote]'``).

Every failure of the object store is an :class:`~xlarun.errors.EnvironmentProblem` (exit 3) in one line that says what
to do; a key that is not there is ``None`` or ``False``, never an error.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from xlarun.errors import EnvironmentProblem, InputError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_URL = re.compile(r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[^\x00-\x1f]*))?")
INSTALL_HINT = "install boto3: pip install 'xlarun[remote]' (or pip install boto3)"


@dataclass(frozen=True)
class RemoteSpec:
    """A remote: a bucket, a key prefix in it, and the S3 endpoint (None: AWS, or ``$AWS_ENDPOINT_URL``)."""

    name: str
    bucket: str
    prefix: str
    endpoint: str | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_remote_url(url: str, name: str = "", endpoint: str | None = None) -> RemoteSpec:
    """A remote from ``s3://bucket/prefix`` (InputError, exit 2, for anything else)."""
    match = _URL.fullmatch(url)
    if not match:
        raise InputError(f"not an S3 URL: {url!r}", "give s3://BUCKET or s3://BUCKET/PREFIX (a bucket name in lowercase)")
    if endpoint is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", endpoint):
        raise InputError(f"not an endpoint URL: {endpoint!r}", "give http://HOST:PORT or https://HOST")
    prefix = (match["prefix"] or "").strip("/")
    return RemoteSpec(name=name or url, bucket=match["bucket"], prefix=prefix, endpoint=endpoint)


def config_path() -> Path:
    """The user's remotes file: ``$XDG_CONFIG_HOME/xlarun/remotes.json`` (default ``~/.config/xlarun``)."""
    home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(home) / "xlarun" / "remotes.json"


def load_remotes() -> dict[str, RemoteSpec]:
    """Every named remote (none when the file does not exist); InputError when it is not what xlarun writes."""
    path = config_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}", "fix or delete the file, then `xlarun remote add` again") from None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) and isinstance(v.get("url"), str) for v in raw.values()):
        raise InputError(f"{path} is not a remotes file xlarun wrote", "fix or delete it, then `xlarun remote add` again")
    return {name: parse_remote_url(entry["url"], name, entry.get("endpoint")) for name, entry in raw.items()}


def add_remote(name: str, url: str, endpoint: str | None = None) -> RemoteSpec:
    """Name a remote in the user's config (replacing one of that name); written to a temporary file and renamed."""
    if not _NAME.fullmatch(name):
        raise InputError(f"not a remote name: {name!r}", "use letters, digits, '.', '_' and '-' (e.g. team)")
    spec = parse_remote_url(url, name, endpoint)
    remotes = load_remotes()
    remotes[name] = spec
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = {n: {"url": r.url, **({"endpoint": r.endpoint} if r.endpoint else {})} for n, r in sorted(remotes.items())}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return spec


def find_remote(ref: str) -> RemoteSpec:
    """A remote by its name, or an ``s3://`` URL used as it is (its endpoint from ``$AWS_ENDPOINT_URL``)."""
    if ref.startswith("s3://"):
        return parse_remote_url(ref)
    remotes = load_remotes()
    if ref not in remotes:
        known = ", ".join(sorted(remotes)) or "none yet"
        raise InputError(f"no remote named {ref!r} (known: {known})", "`xlarun remote add NAME s3://BUCKET/PREFIX` names one")
    return remotes[ref]


@dataclass(frozen=True)
class RemoteEntry:
    """An object on a remote: its name below the remote's prefix, its size, when it was written (server time)."""

    name: str
    size: int
    modified: datetime


class ObjectStore:
    """The object calls a push and a pull make, on one remote, with S3 errors turned into one-line xlarun errors."""

    def __init__(self, spec: RemoteSpec):
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise EnvironmentProblem("the remote commands need boto3, which is not installed", INSTALL_HINT) from None
        self.spec = spec
        config = Config(  # connections for a pull's or a mirror's runs and their objects in flight at once
            retries={"max_attempts": 4, "mode": "standard"}, connect_timeout=5, read_timeout=60, max_pool_connections=32
        )
        self.client: Any = boto3.session.Session().client("s3", endpoint_url=spec.endpoint, config=config)

    def key(self, name: str) -> str:
        return f"{self.spec.prefix}/{name}" if self.spec.prefix else name

    def names(self, folder: str) -> list[str]:
        """Every key below ``folder`` (a prefix ending in '/'), relative to it."""
        base = self.key(folder)
        out: list[str] = []
        with self.translated(f"list {folder}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.spec.bucket, Prefix=base):
                out.extend(item["Key"][len(base) :] for item in page.get("Contents", ()))
        return out

    def entries(self, folder: str) -> list[RemoteEntry]:
        """Every object below ``folder`` with its size and when the server last wrote it (the server's clock)."""
        base = self.key(folder)
        out: list[RemoteEntry] = []
        with self.translated(f"list {folder}"):
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.spec.bucket, Prefix=base):
                for item in page.get("Contents", ()):
                    out.append(RemoteEntry(folder + item["Key"][len(base) :], int(item["Size"]), item["LastModified"]))
        return out

    def delete(self, names: list[str]) -> None:
        """Delete objects (1,000 a request); a key already gone is no error."""
        with self.translated(f"delete {len(names)} object(s)"):
            for start in range(0, len(names), 1000):
                chunk = [{"Key": self.key(n)} for n in names[start : start + 1000]]
                answer = self.client.delete_objects(Bucket=self.spec.bucket, Delete={"Objects": chunk, "Quiet": True})
                if answer.get("Errors"):
                    first = answer["Errors"][0]
                    raise EnvironmentProblem(
                        f"the S3 server of {self.spec.url} refused to delete {first.get('Key')}: {first.get('Code')}",
                        "check that these credentials may delete; run gc again (what is deleted stays deleted)",
                    )

    def get(self, name: str) -> bytes | None:
        """An object's bytes, None when there is no such key."""
        with self.translated(f"read {name}"):
            try:
                return self.client.get_object(Bucket=self.spec.bucket, Key=self.key(name))["Body"].read()
            except self.client.exceptions.NoSuchKey:
                return None

    def get_range(self, name: str, start: int, size: int) -> bytes | None:
        """Up to ``size`` bytes of an object from byte ``start`` (fewer when it is shorter), None when there is no such key."""
        with self.translated(f"read {name}"):
            try:
                answer = self.client.get_object(
                    Bucket=self.spec.bucket, Key=self.key(name), Range=f"bytes={start}-{start + size - 1}"
                )
            except self.client.exceptions.NoSuchKey:
                return None
            return answer["Body"].read()

    def exists(self, name: str) -> bool:
        with self.translated(f"look up {name}"):
            try:
                self.client.head_object(Bucket=self.spec.bucket, Key=self.key(name))
            except Exception as exc:
                if _code(exc) in ("404", "NoSuchKey", "NotFound"):
                    return False
                raise
        return True

    def put(self, name: str, body: bytes) -> None:
        with self.translated(f"write {name}"):
            self.client.put_object(Bucket=self.spec.bucket, Key=self.key(name), Body=body)

    def upload(self, name: str, path: Path) -> None:
        """A file uploaded (in parts when large: a part left by an interruption is never a visible object)."""
        with self.translated(f"write {name}"):
            self.client.upload_file(str(path), self.spec.bucket, self.key(name))

    def download(self, name: str, path: Path) -> None:
        with self.translated(f"read {name}"):
            self.client.download_file(self.spec.bucket, self.key(name), str(path))

    def put_once(self, name: str, body: bytes) -> bool:
        """Write a key only if no object has it (``If-None-Match: *``); False when one already had it."""
        with self.translated(f"publish {name}"):
            try:
                self.client.put_object(Bucket=self.spec.bucket, Key=self.key(name), Body=body, IfNoneMatch="*")
            except Exception as exc:
                if _code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                    return False
                raise
        return True

    def translated(self, doing: str) -> _Translated:
        return _Translated(self.spec, doing)


def _code(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        return str(error.get("Code") or response.get("ResponseMetadata", {}).get("HTTPStatusCode") or "")
    return ""


_ACCESS = ("AccessDenied", "403", "AllAccessDisabled")
_KEYS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "InvalidClientTokenId")


class _Translated:
    """Turns botocore's exceptions into one :class:`EnvironmentProblem` line (never a credential in it)."""

    def __init__(self, spec: RemoteSpec, doing: str):
        self.spec, self.doing = spec, doing

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if exc is None or not isinstance(exc, Exception) or isinstance(exc, EnvironmentProblem):
            return
        import botocore.exceptions as bex
        from boto3.exceptions import Boto3Error

        where = f"{self.spec.url}" + (f" at {self.spec.endpoint}" if self.spec.endpoint else "")
        code = _code(exc)
        if isinstance(exc, Boto3Error):  # a transfer's failure carries the S3 error code in its text only
            found = re.search(r"\((\w+)\) when calling", str(exc))
            code = found[1] if found else type(exc).__name__
        if isinstance(exc, bex.NoCredentialsError):
            message, hint = (
                f"no AWS credentials to reach {where}",
                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
            )
        elif isinstance(exc, (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ReadTimeoutError)):
            message, hint = f"cannot reach the S3 server of {where}", "check --endpoint and that the server is up"
        elif code == "NoSuchBucket":
            message, hint = f"the bucket {self.spec.bucket!r} does not exist ({where})", "create it, or fix the remote's URL"
        elif code in _KEYS:
            message, hint = f"the S3 server of {where} refused the credentials", "check AWS_ACCESS_KEY_ID / AWS_PROFILE"
        elif code in _ACCESS:
            message = f"access denied: cannot {self.doing} on {where}"
            hint = "these credentials may be read-only: pushing needs write access to the bucket"
        elif isinstance(exc, (bex.BotoCoreError, bex.ClientError)) or code:
            message, hint = (
                f"S3 error on {where} ({self.doing}): {code or type(exc).__name__}",
                "try again; `xlarun push` resumes",
            )
        else:
            return
        raise EnvironmentProblem(message, hint) from None
