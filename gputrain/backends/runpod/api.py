"""A small client for RunPod's REST API v2 (``https://api.runpod.io/v2``), on httpx.

Why its own client: the retry rules differ per call. Reads and deletes are idempotent and are retried on
5xx, 429 (honouring ``Retry-After``) and lost connections. A create is retried only on 429, because a
create whose answer was lost may still have made a (billed) pod; after such a loss the caller looks the
pod up by its deterministic name instead of creating another — for ``lost_create_s``, because the server
may make the pod seconds after the answer was lost. Errors come back as RFC 9457 problem objects and are
turned into one-line :class:`RunPodError` messages; an answer that is not the JSON the contract promises (a
proxy's HTML 502 page, a field of the wrong type) is one line too, never a traceback or a page of HTML.
Capacity refusals get their own type so that ``up`` can try other data centres or the other cloud.

The API key is sent only in the ``Authorization`` header; debug output redacts it and the pod's env.
"""

from __future__ import annotations

import email.utils
import html
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gputrain.backends.runpod.pods import Pod
from gputrain.errors import RunPodError, RunPodUsageError

if TYPE_CHECKING:
    import httpx

DEFAULT_BASE_URL = "https://api.runpod.io"
BASE_URL_ENV = "GPUTRAIN_RUNPOD_API_URL"
API_KEY_ENV = "RUNPOD_API_KEY"
MAX_RETRY_AFTER_S = 300.0

# RunPod's capacity refusals carry no machine-readable code, only a human-readable detail (the OpenAPI
# document says so for createPod's 400), so the detail is matched.
_CAPACITY_RE = re.compile(
    r"no longer any instances|no instances available|not enough (?:free )?(?:gpus|capacity)|"
    r"insufficient capacity|could not be placed|no capacity|out of capacity",
    re.IGNORECASE,
)


class RunPodCapacityError(RunPodError):
    """The requested GPU type/count has no free machines in the requested cloud and data centres."""


class RunPodNotFound(RunPodError):
    """The pod (or other resource) does not exist (any more)."""


def load_api_key(env: dict[str, str] | None = None, home: Path | None = None) -> str:
    """The key from ``RUNPOD_API_KEY`` or RunPod's own ``~/.runpod/config.toml``; never from a flag."""
    env = dict(os.environ) if env is None else env
    key = (env.get(API_KEY_ENV) or "").strip()
    if key:
        return key
    config = (home or Path.home()) / ".runpod" / "config.toml"
    if config.is_file():
        key = _key_from_config(config.read_text(encoding="utf-8", errors="replace"))
        if key:
            return key
    raise RunPodUsageError(
        f"{API_KEY_ENV} is not set: export it (or run `runpodctl config` to write ~/.runpod/config.toml); "
        "it is never accepted as a flag"
    )


def _key_from_config(text: str) -> str:
    try:
        import tomllib
    except ImportError:  # Python 3.10: the file is one flat table in practice
        match = re.search(r'^\s*api_?key\s*=\s*"([^"]+)"', text, re.MULTILINE | re.IGNORECASE)
        return match.group(1).strip() if match else ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return ""
    tables = [data, *(v for v in data.values() if isinstance(v, dict))]
    for table in tables:
        for name in ("apikey", "api_key", "apiKey"):
            value = table.get(name)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return ""


def redact(obj: Any) -> Any:
    """A copy safe to print: Authorization headers and every env value are replaced by ``***``."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for key, value in obj.items():
            lowered = str(key).lower()
            if lowered in ("authorization", "proxy-authorization"):
                out[key] = "***"
            elif lowered == "env" and isinstance(value, dict):
                out[key] = {name: "***" for name in value}
            else:
                out[key] = redact(value)
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def _gist(text: str) -> str:
    """A few words of a body that is not a problem object: an HTML page's ``<title>`` (a proxy's "502 Bad
    Gateway"), else its first 80 visible characters; never the page itself."""
    title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
    if title:
        return f"an HTML page ({' '.join(html.unescape(title.group(1)).split())[:80]})"
    if re.search(r"<(?:!doctype|html|body|head)\b", text, re.IGNORECASE):
        return "an HTML page"
    return " ".join(text.split())[:80]


def problem_message(status: int, body: Any, what: str) -> str:
    """One line from an RFC 9457 problem object (or whatever the server sent instead)."""
    if isinstance(body, dict) and ("detail" in body or "title" in body):
        title = str(body.get("title") or "").strip()
        detail = str(body.get("detail") or "").strip()
        text = f"{status} {title}: {detail}" if detail else f"{status} {title}"
        errors = body.get("errors")
        if isinstance(errors, list) and errors:
            text += " (" + "; ".join(str(e) for e in errors[:5]) + ")"
    else:
        snippet = _gist(str(body or ""))
        text = f"{status} {snippet}" if snippet else f"HTTP {status}"
    return " ".join(f"RunPod API {what} failed: {text}".split())


class RunPodClient:
    """Pods endpoints of the v2 API with the retry policy described in the module docstring."""

    def __init__(
        self,
        api_key: str,
        base_url: str | None = None,
        *,
        max_attempts: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        timeout_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        debug: bool | None = None,
        lost_create_s: float = 120.0,
        lost_create_poll_s: float = 5.0,
    ) -> None:
        import httpx

        self._key = api_key
        self.lost_create_s = lost_create_s
        self.lost_create_poll_s = lost_create_poll_s
        self.base_url = (base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self.debug = bool(os.environ.get("GPUTRAIN_DEBUG")) if debug is None else debug
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=timeout_s,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": "gputrain"},
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RunPodClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- pods -------------------------------------------------------------------------------------------
    def list_pods(self) -> list[Pod]:
        body = self._json("GET", "/v2/pods", what="list pods")
        pods = body.get("pods", [])
        if not isinstance(pods, list):
            raise RunPodError(f"RunPod API list pods: unexpected answer: 'pods' is {type(pods).__name__}, "
                              "not a list")
        return [_pod(p, "list pods") for p in pods]

    def get_pod(self, pod_id: str) -> Pod:
        return _pod(self._json("GET", f"/v2/pods/{pod_id}", what=f"get pod {pod_id}"), f"get pod {pod_id}")

    def find_pods(self, name: str) -> list[Pod]:
        """Live pods (anything not TERMINATED) carrying exactly this name."""
        return [p for p in self.list_pods() if p.name == name and p.status != "TERMINATED"]

    def create_pod(self, body: dict[str, Any]) -> Pod:
        """POST /v2/pods, retried on 429 only; a lost answer is resolved by looking the name up."""
        import httpx

        name = str(body["name"])
        waited = 0.0
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self._send("POST", "/v2/pods", json=body)
            except httpx.TransportError as exc:
                return self._recover_lost_create(name, f"connection lost ({type(exc).__name__})")
            if response.status_code == 429:
                delay = self._delay(response, attempt)
                if attempt == self.max_attempts or delay > MAX_RETRY_AFTER_S:
                    raise RunPodError(
                        f"RunPod API create pod: still rate limited (429) after {attempt} tries over "
                        f"{waited:.0f} s; nothing was created — wait {max(60.0, delay):.0f} s and run `up` again")
                self._sleep(delay)
                waited += delay
                continue
            if response.status_code >= 500:
                return self._recover_lost_create(name, f"server answered {response.status_code}")
            if response.status_code != 201 and response.status_code != 200:
                self._raise(response, "create pod")
            try:
                data = response.json()
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
                return self._recover_lost_create(name, f"the answer was {_gist(response.text) or 'empty'}, "
                                                       "not JSON")
            return _pod(data, "create pod")
        raise AssertionError("unreachable")

    def _recover_lost_create(self, name: str, why: str) -> Pod:
        """The create's answer was lost: the pod may exist, or appear seconds later. Look for its name for
        ``lost_create_s`` before saying that none was found (and even then, not that none will be)."""
        looks = 1 + max(0, int(self.lost_create_s / max(self.lost_create_poll_s, 0.01)))
        for look in range(looks):
            if look:
                self._sleep(self.lost_create_poll_s)
            try:
                found = self.find_pods(name)
            except RunPodError:
                found = []
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                ids = ", ".join(p.id for p in found)
                raise RunPodError(f"create pod {name}: {why}, and now {len(found)} pods carry that name ({ids}); "
                                  f"terminate them with `gputrain runpod down {name}`")
        raise RunPodError(
            f"create pod {name}: {why}; no pod with that name appeared within {self.lost_create_s:.0f} s, but "
            f"RunPod may still make it: check `gputrain runpod list` before running `up` again, and "
            f"`gputrain runpod down {name}` if it shows up"
        )

    def start_pod(self, pod_id: str) -> None:
        """Start a stopped (EXITED) pod again; its volume is still there, its container disk is not."""
        self._json("POST", f"/v2/pods/{pod_id}/action", what=f"start pod {pod_id}", json={"action": "start"})

    def delete_pod(self, pod_id: str) -> bool:
        """Terminate a pod. True when this call deleted it, False when it was already gone (404)."""
        try:
            self._json("DELETE", f"/v2/pods/{pod_id}", what=f"terminate pod {pod_id}")
        except RunPodNotFound:
            return False
        return True

    def pod_logs(self, pod_id: str, tail: int = 200, idle_s: float = 3.0) -> list[str]:
        """Recent container log lines. The endpoint is an SSE stream that stays open for live lines after
        the backfill, so reading stops after ``tail`` lines or once the stream has been quiet for ``idle_s``."""
        import json

        import httpx

        params: dict[str, str | int] = {"source": "container", "tail": tail}
        timeout = httpx.Timeout(self._http.timeout.connect or 30.0, read=idle_s)
        lines: list[str] = []
        if self.debug:
            print(f"debug: GET {self.base_url}/v2/pods/{pod_id}/logs (stream)", file=sys.stderr)
        try:
            with self._http.stream("GET", f"/v2/pods/{pod_id}/logs", params=params, timeout=timeout) as response:
                if response.status_code != 200:
                    response.read()
                    self._raise(response, f"logs of pod {pod_id}")
                for raw in response.iter_lines():
                    if not raw.startswith("data:"):
                        continue
                    try:
                        lines.append(str(json.loads(raw[5:].strip()).get("line", "")))
                    except (ValueError, AttributeError, RecursionError):
                        continue
                    if len(lines) >= tail:
                        break
        except httpx.ReadTimeout:
            pass  # the backfill is over; live lines are not waited for
        except httpx.TransportError as exc:
            raise RunPodError(f"logs of pod {pod_id}: cannot reach {self.base_url} ({type(exc).__name__})") from None
        return lines

    # -- plumbing -----------------------------------------------------------------------------------------
    def _json(self, method: str, path: str, *, what: str, **kwargs: Any) -> dict[str, Any]:
        response = self._request(method, path, **kwargs)
        if response.status_code >= 400:
            self._raise(response, what)
        if response.status_code == 204 or not response.content:
            return {}
        try:
            data = response.json()
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
            raise RunPodError(f"RunPod API {what}: the answer ({response.status_code}) was "
                              f"{_gist(response.text) or 'empty'}, not JSON; try again later") from None
        if not isinstance(data, dict):
            raise RunPodError(f"RunPod API {what}: unexpected answer: a JSON {type(data).__name__}, not an object")
        return data

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Idempotent calls: retried on 429, 5xx and transport errors with backoff."""
        import httpx

        for attempt in range(1, self.max_attempts + 1):
            last = attempt == self.max_attempts
            try:
                response = self._send(method, path, **kwargs)
            except httpx.TransportError as exc:
                if last:
                    raise RunPodError(
                        f"RunPod API {method} {path}: cannot reach {self.base_url} ({type(exc).__name__})"
                    ) from None
                self._sleep(self._backoff(attempt))
                continue
            if (response.status_code == 429 or response.status_code >= 500) and not last:
                self._wait(response, attempt)
                continue
            return response
        raise AssertionError("unreachable")

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        if self.debug:
            shown = redact({"headers": dict(self._http.headers), "json": kwargs.get("json")})
            print(f"debug: {method} {self.base_url}{path} {shown}", file=sys.stderr)
        response = self._http.request(method, path, **kwargs)
        if self.debug:
            print(f"debug: -> {response.status_code}", file=sys.stderr)
        return response

    def _backoff(self, attempt: int) -> float:
        return float(min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)))

    def _delay(self, response: httpx.Response, attempt: int) -> float:
        delay = retry_after_s(response.headers.get("Retry-After"))
        return self._backoff(attempt) if delay is None else delay

    def _wait(self, response: httpx.Response, attempt: int) -> None:
        delay = self._delay(response, attempt)
        if delay > MAX_RETRY_AFTER_S:
            self._raise(response, "request (rate limited)")
        self._sleep(delay)

    def _raise(self, response: httpx.Response, what: str) -> None:
        try:
            body: Any = response.json()
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
            body = response.text
        message = problem_message(response.status_code, body, what)
        if response.status_code == 401:
            raise RunPodError(message + f" — check {API_KEY_ENV}")
        if response.status_code == 404:
            raise RunPodNotFound(message)
        detail = str(body.get("detail", "")) if isinstance(body, dict) else str(body)
        if response.status_code == 400 and _CAPACITY_RE.search(detail):
            raise RunPodCapacityError(message)
        raise RunPodError(message)


def _pod(data: Any, what: str) -> Pod:
    """A Pod from an answer, or one line saying which field broke the contract."""
    if not isinstance(data, dict):
        raise RunPodError(f"RunPod API {what}: unexpected answer: a JSON {type(data).__name__}, not a pod object")
    try:
        return Pod.from_api(data)
    except (ValueError, TypeError, AttributeError) as exc:
        raise RunPodError(f"RunPod API {what}: unexpected answer: {' '.join(str(exc).split())[:160]}") from None


def retry_after_s(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None when absent/garbled."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
