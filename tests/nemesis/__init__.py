"""The nemesis suite: a cluster across network namespaces, random faults between hosts, a recorded
history and an independent checker."""
