"""The ctypes mirror of a kernel build's ``VerifyParams``, read from its ``verify_params.h``.

The struct is the one thing the host hands the device, so the host must lay it out exactly as
the build it launches was compiled. Reading the members from the header itself keeps the
shipped mirror in step with the sources and lets a same-run A/B launch an older tree, whose
struct may lack a member, with that tree's own layout. The header's rule (every member 8 bytes
wide) is what makes a mirror by names and kinds exact: a member of any other type is refused.
"""

from __future__ import annotations

import ctypes
import re
from functools import lru_cache
from pathlib import Path

HEADER = "verify_params.h"
STRUCT = "VerifyParams"
# member types the header may use, as ctypes types (each 8 bytes wide)
_SCALARS = {"int64_t": ctypes.c_int64, "double": ctypes.c_double}
_BODY = re.compile(r"\bstruct\s+" + STRUCT + r"\s*\{(?P<body>[^{}]*)\}\s*;")
_DECLARATION = re.compile(r"^(?P<type>(?:const\s+)?[A-Za-z_][A-Za-z0-9_]*)\s*(?P<names>[\s\S]+)$")
_NAME = re.compile(r"^(?P<stars>\**)\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")


def _without_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*[\s\S]*?\*/", " ", text)


def params_fields(text: str, origin: str = HEADER) -> list[tuple[str, type]]:
    """(member name, ctypes type) in declaration order from a header's ``struct VerifyParams``:
    pointers as c_void_p, ``int64_t`` as c_int64, ``double`` as c_double. Raises ValueError
    naming ``origin`` and the declaration it cannot mirror."""
    found = _BODY.search(_without_comments(text))
    if found is None:
        raise ValueError(f"{origin}: no 'struct {STRUCT} {{ ... }};' found")
    fields: list[tuple[str, type]] = []
    for declaration in (d.strip() for d in found["body"].split(";")):
        if not declaration:
            continue
        head = _DECLARATION.match(declaration)
        if head is None:
            raise ValueError(f"{origin}: cannot read the member declaration {declaration!r}")
        base = head["type"].removeprefix("const").strip()
        for part in head["names"].split(","):
            name = _NAME.match(part.strip())
            if name is None:
                raise ValueError(f"{origin}: cannot read the member {part.strip()!r} of {declaration!r}")
            if name["stars"]:
                kind = ctypes.c_void_p
            elif base in _SCALARS:
                kind = _SCALARS[base]
            else:
                raise ValueError(f"{origin}: member {name['name']!r} has type {base!r}; expected a pointer, "
                                 f"int64_t or double (every member 8 bytes wide)")
            fields.append((name["name"], kind))
    if not fields:
        raise ValueError(f"{origin}: struct {STRUCT} has no members")
    names = [n for n, _ in fields]
    if len(set(names)) != len(names):
        raise ValueError(f"{origin}: struct {STRUCT} declares a member twice")
    return fields


@lru_cache(maxsize=None)
def params_struct(source_root: Path) -> type[ctypes.Structure]:
    """A ctypes.Structure laid out as ``source_root``/verify_params.h's VerifyParams."""
    header = Path(source_root) / HEADER
    fields = params_fields(header.read_text(), str(header))
    return type(STRUCT, (ctypes.Structure,), {"_fields_": fields, "member_names": tuple(n for n, _ in fields),
                                              "__doc__": f"Mirror of {header} (read from it)."})


def fill_params(struct: type[ctypes.Structure], values: dict) -> ctypes.Structure:
    """An instance of ``struct`` (from params_struct()) from ``values`` (member name -> value): members the host
    knows but the build's struct lacks are left out (an older build). Raises ValueError
    naming any member of the struct that ``values`` does not give (a build the host cannot
    fill)."""
    try:  # every launch: positional, no per-call checks unless a member is missing
        return struct(*[values[n] for n in struct.member_names])
    except KeyError:
        missing = [n for n in struct.member_names if n not in values]
        raise ValueError(f"the kernel build's {STRUCT} has members this host does not fill: {missing}") from None
