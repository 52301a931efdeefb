"""Planted bugs: mutations of the Lua scripts and the runtime that the test
suite must catch (python tests/mutations/run.py)."""
