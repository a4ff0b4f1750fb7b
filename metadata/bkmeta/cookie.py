"""Bookie cookies: the guard against serving data that is not there.

A cookie records which directories a bookie was started with, and for which cluster. It is stored
at ``/ledgers/cookies/<bookieId>`` and copied into ``current/VERSION`` of every journal and ledger
directory, in BookKeeper's format: the layout version on the first line, then the TextFormat of
``CookieFormat``. A bookie whose directories do not carry the cookie registered in ZooKeeper (for
example a replaced, empty disk) refuses to start: serving it would acknowledge reads of entries
that no longer exist.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format

from bkmeta.layout import ZkLayout
from bkmeta.store import MetadataStore, ZkNodeExistsError, ZkNoNodeError
from bkproto.errors import BKError
from bkproto.v1 import metadata_pb2

log = logging.getLogger(__name__)

COOKIE_LAYOUT_VERSION = 5
VERSION_FILE = Path("current") / "VERSION"


class InvalidCookieError(BKError):
    """The bookie's directories do not match its cookie: it must not start."""

    default_message = "bookie cookie mismatch"


@dataclass(frozen=True)
class Cookie:
    bookie_host: str
    journal_dirs: tuple[str, ...]
    ledger_dirs: tuple[str, ...]
    instance_id: str | None = None

    @classmethod
    def for_dirs(
        cls, bookie_id: str, journal_dirs: Sequence[str | Path], ledger_dirs: Sequence[str | Path],
        instance_id: str | None,
    ) -> Cookie:
        return cls(
            bookie_id,
            tuple(str(Path(d).resolve()) for d in journal_dirs),
            tuple(str(Path(d).resolve()) for d in ledger_dirs),
            instance_id,
        )

    def to_bytes(self) -> bytes:
        msg = metadata_pb2.CookieFormat(
            bookieHost=self.bookie_host,
            journalDir=",".join(self.journal_dirs),
            # BookKeeper encodes the ledger dirs as "<count>\t<dir>\t<dir>...".
            ledgerDirs="\t".join([str(len(self.ledger_dirs)), *self.ledger_dirs]),
        )
        if self.instance_id is not None:
            msg.instanceId = self.instance_id
        return f"{COOKIE_LAYOUT_VERSION}\n{text_format.MessageToString(msg)}".encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Cookie:
        try:
            version_line, _, body = data.decode().partition("\n")
            version = int(version_line.strip())
            if version < 4:
                raise ValueError(f"cookie layout version {version} is too old")
            msg = metadata_pb2.CookieFormat()
            text_format.Parse(body, msg)
            count, *dirs = msg.ledgerDirs.split("\t")
            if int(count) != len(dirs):
                raise ValueError(f"ledgerDirs says {count} dirs but lists {len(dirs)}")
        except (ValueError, text_format.ParseError, UnicodeDecodeError) as e:
            raise InvalidCookieError(f"unreadable cookie at {where}: {e}") from e
        return cls(
            msg.bookieHost,
            tuple(msg.journalDir.split(",")) if msg.journalDir else (),
            tuple(dirs),
            msg.instanceId if msg.HasField("instanceId") else None,
        )

    def differences(self, other: Cookie) -> list[str]:
        out = []
        for name in ("bookie_host", "journal_dirs", "ledger_dirs", "instance_id"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{name}: {theirs!r} != expected {mine!r}")
        return out


class CookieStore:
    """The cluster's cookies in ZooKeeper, one znode per bookie id (BookKeeper's ``cookie_get``,
    ``cookie_delete``). Whether deleting one is safe is the caller's call: see the shell."""

    def __init__(self, zk: MetadataStore, layout: ZkLayout) -> None:
        self._zk = zk
        self._layout = layout

    async def bookie_ids(self) -> list[str]:
        """Every bookie id holding a cookie, sorted."""
        try:
            return sorted(await self._zk.get_children(self._layout.cookies))
        except ZkNoNodeError:
            return []

    async def get(self, bookie_id: str) -> tuple[Cookie, int] | None:
        """The bookie's cookie and its znode version, or None when it has none. An unreadable
        cookie raises :class:`InvalidCookieError` naming the znode."""
        path = self._layout.cookie(bookie_id)
        try:
            data, stat = await self._zk.get(path)
        except ZkNoNodeError:
            return None
        return Cookie.from_bytes(data, path), stat.version

    async def delete(self, bookie_id: str, version: int = -1) -> bool:
        """Delete the cookie (only at ``version`` unless -1); False when there was none."""
        try:
            await self._zk.delete(self._layout.cookie(bookie_id), version=version)
        except ZkNoNodeError:
            return False
        return True


def read_local_cookies(dirs: Sequence[str | Path]) -> dict[str, Cookie]:
    """The cookie (``current/VERSION``) of each directory that has one, by directory."""
    found = {str(d): _read_local(str(d)) for d in dirs}
    return {d: Cookie.from_bytes(raw, str(Path(d) / VERSION_FILE)) for d, raw in found.items() if raw}


def _read_local(directory: str) -> bytes | None:
    try:
        return (Path(directory) / VERSION_FILE).read_bytes()
    except FileNotFoundError:
        return None


def _write_local(directory: str, data: bytes) -> None:
    path = Path(directory) / VERSION_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _write_all_local(dirs: list[str], data: bytes) -> None:
    for d in dirs:
        _write_local(d, data)


async def verify_or_create_cookie(
    zk: MetadataStore,
    bookie_id: str,
    journal_dirs: Sequence[str | Path],
    ledger_dirs: Sequence[str | Path],
    instance_id: str | None,
    layout: ZkLayout | None = None,
) -> Cookie:
    """Check this bookie's directories against its cookie, writing the cookie on first start.

    Raises :class:`InvalidCookieError` (with what to do) when the directories and ZooKeeper disagree.
    """
    layout = layout or ZkLayout()
    expected = Cookie.for_dirs(bookie_id, journal_dirs, ledger_dirs, instance_id)
    zk_path = layout.cookie(bookie_id)
    dirs = list(dict.fromkeys([*expected.journal_dirs, *expected.ledger_dirs]))
    local = await asyncio.to_thread(read_local_cookies, dirs)

    found = await CookieStore(zk, layout).get(bookie_id)
    registered = found[0] if found is not None else None

    if registered is None:
        if local:
            raise InvalidCookieError(
                f"directories {sorted(local)} hold a cookie but {zk_path} does not exist: this bookie's data "
                "belongs to a cluster whose metadata is gone (was it nuked?), or its cookie was deleted. "
                "Wipe the directories to start this bookie as a new one: `pybk shell bookieformat` with "
                "this bookie's configuration."
            )
        await asyncio.to_thread(_write_all_local, dirs, expected.to_bytes())
        try:
            await zk.create(zk_path, expected.to_bytes(), makepath=True)
        except ZkNodeExistsError as e:
            raise InvalidCookieError(f"another bookie registered a cookie at {zk_path} concurrently") from e
        log.info("created cookie for new bookie %s", bookie_id)
        return expected

    diffs = expected.differences(registered)
    if diffs:
        raise InvalidCookieError(
            f"bookie {bookie_id} was registered with other directories or another cluster "
            f"({'; '.join(diffs)}). "
            "Start it with the directories it was created with, or retire the old identity: "
            f"`pybk shell decommissionbookie --bookieid {bookie_id}` (re-replicates its ledgers and "
            "deletes its cookie), then `pybk shell bookieformat` to wipe the directories."
        )
    missing = [d for d in dirs if d not in local]
    if missing:
        raise InvalidCookieError(
            f"directories {missing} have no cookie (current/VERSION) but bookie {bookie_id} is registered "
            f"with data in them: a replaced or wiped disk must not serve as if it held the ledgers. "
            f"Restore the disk, or re-replicate its ledgers (`pybk shell recover {bookie_id} -f`) and "
            f"start it as a new bookie: `pybk shell bookieformat -d --bookieid {bookie_id}` with this "
            "bookie's configuration."
        )
    for d, cookie in local.items():
        local_diffs = registered.differences(cookie)
        if local_diffs:
            raise InvalidCookieError(
                f"cookie in {d} does not match {zk_path} ({'; '.join(local_diffs)}): "
                "this directory belongs to another bookie or cluster."
            )
    return registered
