"""Jepsen-style fault injection for the nemesis suite: network namespaces as hosts, faults on them.

`hosts` builds one run's hosts (a bridge, one namespace per host, a forwarder to the host's loopback
services), `proxy` is a TCP forwarder that can delay or cut traffic, `nemesis` the faults themselves.
"""
