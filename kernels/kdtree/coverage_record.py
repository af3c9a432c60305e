"""The coverage record: what one hook says when it takes effect (or fails) in a process.

Wire format, one line, greppable in a server log or journald::

    [kdtree] event=effective hook=defrag-sort rank=3 tp_size=8 pid=4242 \
        start=20261129T081928.123456Z-p4100 version=0.1.0 build=none detail='...'

* ``event``   ``effective`` | ``failed``
* ``hook``    the hook's name (``defrag-sort``, ``verify-override``, ``plugin-load``)
* ``rank``    tensor-parallel rank from SGLang's runtime context, ``?`` when not yet known
* ``tp_size`` tensor-parallel size, ``?`` when not yet known
* ``pid``     the emitting process
* ``start``   one id per server start, shared by the launcher and all its workers;
              ids of later starts sort after ids of earlier ones
* ``version`` the plugin's version; ``build`` the kernel build hash (``none`` if the hook
              involves no kernel); ``detail`` free text (the reason, for ``failed``)

Fields appear in this order; values are shell-quoted when they contain spaces or quotes.
A record starts at ``[kdtree] event=``; anything before it on the line (timestamps, ``[TP3]`` prefixes) is ignored.
The same fields are written as a JSON object when a status directory is configured.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass

PREFIX = "[kdtree]"
MARKER = PREFIX + " event="  # what starts a record (other [kdtree] text is not one)
EVENTS = ("effective", "failed")
FIELDS = ("event", "hook", "rank", "tp_size", "pid", "start", "version", "build", "detail")
UNKNOWN = "?"
_BARE = re.compile(r"[\w@%+=:,./?-]+")


def _quote(value: str) -> str:
    """Shell-quote only what needs it, so plain values stay greppable (``rank=?``)."""
    return value if _BARE.fullmatch(value) else shlex.quote(value)


class RecordFormatError(ValueError):
    """A line or JSON object that carries the prefix but is not a valid record."""


@dataclass(frozen=True)
class CoverageRecord:
    event: str
    hook: str
    rank: int | None
    tp_size: int | None
    pid: int
    start: str
    version: str
    build: str = "none"
    detail: str = ""

    def __post_init__(self):
        if self.event not in EVENTS:
            raise RecordFormatError(f"event must be one of {EVENTS}, got {self.event!r}")
        if not self.hook or not self.start:
            raise RecordFormatError("hook and start must be non-empty")

    # -- line form -------------------------------------------------------------------
    def to_line(self) -> str:
        values = self._text_values()
        return PREFIX + " " + " ".join(f"{k}={_quote(values[k])}" for k in FIELDS)

    @classmethod
    def from_line(cls, line: str) -> "CoverageRecord | None":
        """Parse one log line. None if it holds no record (no ``[kdtree] event=``);
        RecordFormatError if it starts one but is malformed."""
        at = line.find(MARKER)
        if at < 0:
            return None
        body = line[at + len(PREFIX):].strip()
        try:
            tokens = shlex.split(body)
        except ValueError as exc:
            raise RecordFormatError(f"unbalanced quoting in record: {body!r}") from exc
        values = {}
        for token in tokens:
            key, sep, value = token.partition("=")
            if not sep:
                raise RecordFormatError(f"token {token!r} is not key=value")
            values[key] = value
        return cls._from_text_values(values)

    # -- JSON form -------------------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CoverageRecord":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordFormatError(f"not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise RecordFormatError("a record must be a JSON object")
        missing = [k for k in FIELDS if k not in obj]
        if missing:
            raise RecordFormatError(f"record lacks field(s) {missing}")
        try:
            return cls(**{k: obj[k] for k in FIELDS})
        except TypeError as exc:
            raise RecordFormatError(str(exc)) from exc

    # -- helpers ---------------------------------------------------------------------
    def _text_values(self) -> dict[str, str]:
        out = {k: str(v) for k, v in asdict(self).items()}
        out["rank"] = UNKNOWN if self.rank is None else str(self.rank)
        out["tp_size"] = UNKNOWN if self.tp_size is None else str(self.tp_size)
        return out

    @classmethod
    def _from_text_values(cls, values: dict[str, str]) -> "CoverageRecord":
        missing = [k for k in FIELDS if k not in values]
        if missing:
            raise RecordFormatError(f"record lacks field(s) {missing}")

        def optional_int(key: str) -> int | None:
            text = values[key]
            if text == UNKNOWN:
                return None
            try:
                return int(text)
            except ValueError as exc:
                raise RecordFormatError(f"{key} must be an integer or '?', got {text!r}") from exc

        try:
            pid = int(values["pid"])
        except ValueError as exc:
            raise RecordFormatError(f"pid must be an integer, got {values['pid']!r}") from exc
        return cls(
            event=values["event"], hook=values["hook"], rank=optional_int("rank"),
            tp_size=optional_int("tp_size"), pid=pid, start=values["start"],
            version=values["version"], build=values["build"], detail=values["detail"],
        )
