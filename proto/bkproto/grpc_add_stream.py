"""What bookie and client agree on for the gRPC AddEntries stream, beyond its messages.

The bookie sends :data:`ACCEPTED` as the call's initial metadata once it has taken the call (its
caller holds the write right), and the client writes nothing before it sees it. Why: a call the
bookie refuses ends at once (PERMISSION_DENIED, ``EUA: ...``); a write racing that end fails in
grpc.aio with an internal error ("Failed execute_batch"), which grpc.aio then makes the call's
own status, so the bookie's reason would be lost to writer and reader alike. Before any write,
the call's status is the bookie's.
"""

from __future__ import annotations

ACCEPTED: tuple[str, str] = ("bk-add-stream", "accepted")
