"""Client operations, one class per operation: add (write path), read, LAC reads, recovery."""
