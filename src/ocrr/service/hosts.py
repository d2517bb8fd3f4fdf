"""Which ``Host`` names the service answers (``--allowed-hosts``): against DNS rebinding.

A page on another site can point its own name at 127.0.0.1 and have the visitor's browser
send requests to a service on the visitor's machine, as same-origin requests to that name:
the open endpoints would answer it, whatever they say. The browser still writes the
attacker's name in ``Host``, so the service answers only the names it is known by: by
default the loopback names and the address it listens on (not a wildcard address, which
says nothing of the names clients use).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse

from ocrr.errors import OcrrError

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_NAME = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?")  # a DNS name or IPv4 address; *.domain for any below it


def allowed_hosts(given: Iterable[str] | None, bound: str) -> tuple[str, ...]:
    """The names answered: ``given`` (checked, lowercased, IPv6 in brackets; ``*``: any
    name), or the default for a service listening on ``bound``."""
    if given is None:
        default = list(LOOPBACK_NAMES)
        if not _is_wildcard(bound):
            default.append(_normalise(bound))
        return tuple(dict.fromkeys(default))
    if isinstance(given, str) or not all(isinstance(name, str) for name in given):
        raise OcrrError(f"--allowed-hosts takes a list of names, got {given!r}")
    names = tuple(dict.fromkeys(_normalise(name) for name in given))
    if not names:
        raise OcrrError("--allowed-hosts needs at least one name (e.g. localhost), or * for any")
    return names


def _normalise(name: str) -> str:
    name = name.strip().lower()
    if name == "*":
        return name
    try:  # an IPv6 address, with or without its brackets
        return f"[{ipaddress.IPv6Address(name.strip('[]'))}]"
    except ValueError:
        pass
    if not _NAME.fullmatch(name):
        raise OcrrError(
            f"--allowed-hosts {name!r}: give host names as clients write them (ocrr.example.com, "
            "*.example.com for any name below it, 10.0.0.5, [::1]), without scheme or port; * allows any"
        )
    return name


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


class AllowedHosts:
    """ASGI middleware: pass requests whose ``Host`` is one of ``hosts`` (Starlette's
    ``TrustedHostMiddleware`` matches it), answer any other with 400 naming
    ``--allowed-hosts``. It wraps the whole app, so it sees every request first."""

    def __init__(self, app, hosts: Iterable[str]):
        self.app, self.hosts = app, tuple(hosts)
        self._check = TrustedHostMiddleware(_mark_allowed, allowed_hosts=list(self.hosts), www_redirect=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or self._check.allow_any:
            return await self.app(scope, receive, send)
        await self._check(scope, receive, _discard)  # only marks the scope: answers nothing
        if scope.pop("ocrr.host_allowed", False):
            return await self.app(scope, receive, send)
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")[:200]
        refusal = JSONResponse(
            {
                "detail": f"this service does not answer for the name {host!r} (Host header); if clients "
                "reach it by that name, add it to ocrr serve's --allowed-hosts"
            },
            status_code=400,
        )
        await refusal(scope, receive, send)


async def _mark_allowed(scope, receive, send) -> None:
    scope["ocrr.host_allowed"] = True


async def _discard(message) -> None:
    pass
