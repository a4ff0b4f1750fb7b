"""Answers and parameters of the HTTP admin API: JSON replies, the JSON error body, BookKeeper's
flag and number parameters (query or JSON body), and the HTTP status of each error kind."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from bkproto.errors import (
    BKError,
    IllegalOpError,
    IncorrectParameterError,
    MetadataStoreError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)


class BadRequest(ValueError):
    """A parameter or body the endpoint cannot take (400)."""


class Conflict(RuntimeError):
    """The call cannot be done in the cluster's present state (409), e.g. no auditor to act on it."""


class Unavailable(RuntimeError):
    """What the call needs cannot be reached now (503), e.g. ZooKeeper."""


def json_reply(value: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=json.dumps(value).encode(), content_type="application/json")


def text_reply(text: str, status: int = 200) -> web.Response:
    """BookKeeper answers some calls with a sentence, not JSON: so does this API, for its tools."""
    return web.Response(status=status, text=text, content_type="text/plain", charset="utf-8")


def error_reply(status: int, message: str) -> web.Response:
    return json_reply({"error": message}, status)


def status_of(exc: Exception) -> int:
    """The HTTP status of an error a handler raised."""
    if isinstance(exc, BadRequest | IncorrectParameterError):
        return 400
    if isinstance(exc, NoSuchLedgerError | NoSuchEntryError):
        return 404
    if isinstance(exc, UnauthorizedAccessError):
        return 403
    if isinstance(exc, Conflict | IllegalOpError):
        return 409
    if isinstance(exc, Unavailable | MetadataStoreError | TimeoutError):
        return 503
    if isinstance(exc, BKError):
        return 500
    return 500


def message_of(exc: Exception) -> str:
    """The error text of an answer: the API's own refusals speak for themselves, other errors
    are named by their kind (BookKeeper's, as NoSuchLedgerError)."""
    if isinstance(exc, BadRequest | Conflict | Unavailable):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


async def json_object(request: web.Request, example: str) -> dict[str, Any]:
    """The request's body as a JSON object (the server has read it already, bounded)."""
    body = await request.read()
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest(f"body is not JSON; expected a JSON object like {example}") from None
    if not isinstance(value, dict):
        raise BadRequest(f"expected a JSON object like {example}")
    return value


def flag(value: object, name: str, default: bool | None = None) -> bool:
    """A JSON boolean, or BookKeeper's string form of one ("true"/"false", as its docs write)."""
    if value is None:
        if default is None:
            raise BadRequest(f"{name} is required (true or false)")
        return default
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise BadRequest(f"{name} must be true or false, got {value!r}")
    return value


def whole_number(value: object, name: str, default: int | None = None, minimum: int = 0) -> int:
    """A query or JSON whole number >= ``minimum`` (a JSON number, or its text)."""
    if value is None:
        if default is None:
            raise BadRequest(f"{name} is required")
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise BadRequest(f"{name} must be a whole number, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {value!r}") from None
    if number < minimum:
        raise BadRequest(f"{name} must be >= {minimum}, got {number}")
    return number
