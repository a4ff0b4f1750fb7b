"""A kazoo threading handler whose ``select`` costs one ``poll`` syscall and whose results can run
a callback inline (:class:`bkmeta.zk_connection.InlineAsyncResult`).

kazoo's default ``select`` builds an epoll selector, registers the socket and closes it again on
every call: three extra syscalls and about a quarter of kazoo's connection-thread time under load
(measured with py-spy in ``pybk bench metadata``). The connection thread is the ceiling of a
Python ZooKeeper client, so this matters. ``poll`` has no descriptor limit, unlike ``select``.
"""

from __future__ import annotations

import select
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

from bkmeta.zk_connection import InlineAsyncResult

_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLHUP | select.POLLERR | select.POLLNVAL


class PollingThreadingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    def async_result(self) -> InlineAsyncResult:
        return InlineAsyncResult(self)

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be non-negative")
        poller = select.poll()
        masks: dict[int, int] = {}
        objects: dict[int, tuple[list[Any], list[Any]]] = {}
        for fileobj in rlist:
            fd = fileobj_to_fd(fileobj)
            masks[fd] = masks.get(fd, 0) | select.POLLIN
            objects.setdefault(fd, ([], []))[0].append(fileobj)
        for fileobj in wlist:
            fd = fileobj_to_fd(fileobj)
            masks[fd] = masks.get(fd, 0) | select.POLLOUT
            objects.setdefault(fd, ([], []))[1].append(fileobj)
        for fd, mask in masks.items():
            poller.register(fd, mask)
        ready = poller.poll(None if timeout is None else timeout * 1000.0)
        readable: list[Any] = []
        writable: list[Any] = []
        for fd, events in ready:
            readers, writers = objects[fd]
            # Same precedence as kazoo's selector_select: a readable fd is reported as readable only.
            if readers and events & _READABLE:
                readable.extend(readers)
            elif writers and events & _WRITABLE:
                writable.extend(writers)
        return readable, writable, []
