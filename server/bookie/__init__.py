"""The bookie daemon: gRPC service over DbLedgerStorage."""
