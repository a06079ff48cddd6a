"""Downstream sinks: where the drainer's translated transactions go (see base.Sink)."""
