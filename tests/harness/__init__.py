"""Shared test helpers: real etcd, pd-server and MySQL on loopback."""
