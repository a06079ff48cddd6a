"""Pump storage: value log, LevelDB index, sorter, slow chaser, GC (see api.py for the contract)."""
