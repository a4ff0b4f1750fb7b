"""Fixture: real bookie processes on loopback ports chosen at run time."""
