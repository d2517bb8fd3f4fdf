"""HTTP to one ``ocrr serve``: requests with timeouts, and each failure as one clear error.

The client fails closed: a service that cannot be reached, times out or answers 503 (it
found its own storage damaged and stopped answering) raises ``ServiceUnavailable``, and
nothing is accepted from it; a 4xx raises ``ServiceRefused`` with the service's own reason.
"""

from __future__ import annotations

from typing import Any

from ocrr.client.errors import ServiceRefused, ServiceUnavailable
from ocrr.errors import OcrrError

__all__ = ["Transport", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 30.0  # seconds to connect and for each read; a correction's commit is an fsync away


def _requests():
    try:
        import requests
    except ImportError:
        raise OcrrError("the verifying client needs requests: pip install -e '.[client]'") from None
    return requests


class Transport:
    """GET and POST to ``url`` (the service's base URL), with the bearer ``token`` when given."""

    def __init__(self, url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise OcrrError(f"service URL {url!r} must start with http:// or https:// (e.g. http://127.0.0.1:8000)")
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout
        self._session = _requests().Session()

    def close(self) -> None:
        self._session.close()

    def _headers(self, auth: bool) -> dict[str, str]:
        if not auth:
            return {}
        if not self.token:
            raise OcrrError("this needs the service token: pass token= (or --token-file / $OCRR_TOKEN)")
        return {"Authorization": f"Bearer {self.token}"}

    def _send(self, method: str, path: str, auth: bool, **kw: Any):
        requests = _requests()
        where = f"{self.url}{path}"
        try:
            r = self._session.request(method, where, headers=self._headers(auth), timeout=self.timeout, **kw)
        except requests.Timeout:
            raise ServiceUnavailable(
                f"{method} {where} timed out after {self.timeout:g} s: nothing was verified or accepted; "
                "retry when the service answers (or raise the timeout)"
            ) from None
        except requests.RequestException as e:
            raise ServiceUnavailable(
                f"cannot reach the service at {self.url} ({type(e).__name__}): nothing was verified or "
                "accepted; check the URL and that `ocrr serve` is running"
            ) from None
        if r.status_code == 503:
            # /checkpoint is 503 also while no head has its witnesses' quorum yet: the service's
            # own reason says which; only other answers mean it failed closed.
            why = (
                "no checkpoint has the witnesses' quorum yet, or the service failed closed (its reason above)"
                if path.startswith("/checkpoint")
                else "it failed closed and answers nothing until its operator restores its storage"
            )
            raise ServiceUnavailable(f"the service answers 503 to {path} ({_detail(r)}): {why}; nothing was accepted")
        if r.status_code >= 400:
            hint = " (check the token)" if r.status_code == 401 else ""
            raise ServiceRefused(f"the service refused {method} {path} with {r.status_code}: {_detail(r)}{hint}")
        return r

    def get_text(self, path: str, auth: bool = False) -> str:
        return self._send("GET", path, auth).text

    def get_bytes(self, path: str, auth: bool = False) -> bytes:
        return self._send("GET", path, auth).content

    def get_json(self, path: str, auth: bool = False, params: dict | None = None) -> Any:
        return _json(self._send("GET", path, auth, params=params), path)

    def post_json(self, path: str, body: dict, auth: bool = False) -> Any:
        return _json(self._send("POST", path, auth, json=body), path)


def _json(response, path: str) -> Any:
    try:
        return response.json()
    except ValueError:
        raise ServiceRefused(f"the service answered {path} with something that is not JSON") from None


def _detail(response) -> str:
    """The service's ``{"detail": ...}``, else the start of its answer."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return str(detail) if detail is not None else (response.text[:200] or response.reason or "no reason given")
