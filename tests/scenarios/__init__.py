"""Whole-cluster scenarios (DESIGN §6): a workload runs while something is disturbed, then an audit."""
