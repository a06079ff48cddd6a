"""Jepsen-style nemesis suite: random faults between hosts, a recorded history, an independent checker."""
