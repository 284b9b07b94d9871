"""Failure drills against real broker processes (issue 16): `rmq drill kill`."""
