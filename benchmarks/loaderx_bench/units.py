"""Byte units."""

GIB = 1024**3
MIB = 1024**2
