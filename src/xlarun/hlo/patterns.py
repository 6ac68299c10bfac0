"""Regular expressions compiled on their first use: a module that declares many (the dump names' 28, sharding's 8)
costs nothing to import for a command that never matches them, and each compiles once per process."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from typing import Any, AnyStr, Generic


class LazyPattern(Generic[AnyStr]):
    """``re.compile(pattern, flags)``, done when a method is first called; the methods are ``re.Pattern``'s."""

    __slots__ = ("_compiled", "flags", "pattern")

    def __init__(self, pattern: AnyStr, flags: int = 0) -> None:
        self.pattern: AnyStr = pattern
        self.flags: int = flags
        self._compiled: re.Pattern[AnyStr] | None = None

    @property
    def compiled(self) -> re.Pattern[AnyStr]:
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self.flags)
        return self._compiled

    def match(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.match(string, pos, endpos)

    def search(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.search(string, pos, endpos)

    def fullmatch(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[AnyStr] | None:
        return self.compiled.fullmatch(string, pos, endpos)

    def findall(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> list[Any]:
        return self.compiled.findall(string, pos, endpos)

    def finditer(self, string: AnyStr, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[re.Match[AnyStr]]:
        return self.compiled.finditer(string, pos, endpos)

    def sub(self, repl: AnyStr | Callable[[re.Match[AnyStr]], AnyStr], string: AnyStr, count: int = 0) -> AnyStr:
        return self.compiled.sub(repl, string, count)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r}, {self.flags!r})"
