"""Whole-cluster scenarios: a workload runs while something is disturbed, then an audit.

See docs/architecture.md#testing.
"""
